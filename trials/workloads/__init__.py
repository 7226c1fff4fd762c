"""Built-in workloads and the plugin loader."""
