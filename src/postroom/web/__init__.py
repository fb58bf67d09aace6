"""The web chat page and its static assets."""
