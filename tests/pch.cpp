// Compiles tests/pch.h into the precompiled header of the test binary.
