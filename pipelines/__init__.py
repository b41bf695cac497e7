"""Ready recipes (TOML) for ``ebsdxc process --pipeline NAME``, shipped as package data."""
