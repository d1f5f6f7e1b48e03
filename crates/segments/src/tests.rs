//! Tests that reach inside the engine: hash collisions, zero-copy reads, the cold read path.
