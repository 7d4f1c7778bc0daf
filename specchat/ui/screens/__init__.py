"""The app's screens and dialogs: the chat, the costs (F7), the race, the history, the settings,
the model menu, fetching a model, the first-run layout offer."""
