"""The chat screen's widgets: the legend, the live reply, the prompt, the stats panel, the
transcript and the step-through panel."""
