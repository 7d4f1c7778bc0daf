"""One module a command: each builds its own parser (`add_parser(sub, defaults)`, the config
file's settings as the flags' defaults) and runs it (`run(args)`). specchat/cli.py puts them
together in `ORDER`."""
