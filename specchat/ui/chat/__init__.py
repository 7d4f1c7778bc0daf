"""The chat screen and the parts it composes: the view (transcript, prompt, stats, step panel),
the turn runner (replies in a worker, batched to the screen), the model loader (loads, swaps,
first-run offers) and the command palette's draft commands."""
