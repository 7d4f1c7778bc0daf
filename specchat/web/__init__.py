"""`specchat serve`: the app in web browsers, one app process per tab (textual-serve)."""
