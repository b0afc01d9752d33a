"""The pages of the web control page, one module each, each with `add_routes(app, ctx)`."""
