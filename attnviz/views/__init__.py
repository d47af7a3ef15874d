"""The views: pure Plotly figures, the shape diagram (DOT/HTML), the source panel and exports drawn from a Trace."""
