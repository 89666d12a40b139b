// Compiles common/pch.h into the precompiled header that every dtrain target reuses.
