"""Engine integrations, apart from the core.

Each turns one inference engine's requests into guarded streams and its memory into a pressure
source. The core never imports this package; an integration registers with a guard through its
public extension points (sources, admission checks, status sections).
"""
