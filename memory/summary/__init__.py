"""The rolling summary: fold policy, transcript rendering, the summariser and the consolidator."""
