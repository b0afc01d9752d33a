"""`pinch web login` and `pinch web set-password`: opening the web page (app/web)."""

from __future__ import annotations

import click

from app.cli.support import fail, friendly_errors, load_settings


@click.group()
def web() -> None:
    """The web page served by `pinch gateway` ([web] host:port, loopback by default)."""


@web.command("login")
@friendly_errors
def web_login() -> None:
    """Print a one-time login link for the web page (it works once, for 10 minutes).

    Works while the gateway runs, and inside the container
    (`docker compose exec pinch pinch web login`).
    """
    from app.store_factory import open_agent_database
    from app.web.auth import TOKEN_TTL_S, issue_login_url, web_page_wanted
    from memory.store.backends import store_for

    settings = load_settings()
    if not settings.web.enabled:
        fail("The web page is off ([web] enabled = false); turn it on and restart the gateway.")
    if not web_page_wanted(settings):  # the link is its own all the same (its database)
        click.secho(
            f"Agent {settings.agent_id} has no web page of its own yet: set [web] port in "
            f"{settings.agent_dir / 'config.toml'} (a port no other agent uses) and restart "
            "the gateway; the link below opens that page, no other agent's.",
            fg="yellow",
            err=True,
        )
    db = open_agent_database(settings, vector_backend="numpy")
    try:
        url = issue_login_url(settings, store_for("WebAuthStore", db))
    finally:
        db.close()
    click.echo(url)
    click.echo(
        f"Open it within {int(TOKEN_TTL_S // 60)} minutes; it works once. "
        "(`pinch gateway` must be running.)",
        err=True,
    )


@web.command("set-password")
@click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from standard input (one line; also what happens when standard "
    "input is not a terminal) instead of asking twice.",
)
@friendly_errors
def web_set_password(password_stdin: bool) -> None:
    """Set the web page's password (needed to serve it on a non-loopback host).

    Stored as a scrypt hash in <home>/web-password (mode 0600), never in plain text; another
    agent than the default one has its own, in <home>/agents/NAME/web-password (`--agent NAME`).
    """
    import sys

    from app.web.auth import set_password

    settings = load_settings()
    if password_stdin or not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("New password", hide_input=True, confirmation_prompt=True)
    path = set_password(settings.own_dir, password)
    click.echo(f"Password set (a scrypt hash in {path}). Log in at the page's /login.")
