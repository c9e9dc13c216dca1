"""Lua scripts as Python objects: loading and tree-shaking the Lua, the function library, script
objects and the typed calls."""
