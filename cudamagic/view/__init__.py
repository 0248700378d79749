"""What the user sees: the build report, its text and HTML forms, and the widget."""
