"""The `pinch` command line (main.py is the entry point) and `pinch doctor`, setup and
`pinch init`. May import everything below app; builds what it runs through app.wiring."""
