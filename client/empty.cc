// libkvtier.so has no code of its own: it is the whole-archived static client libraries (see
// install.cmake). A shared library target still needs one source file.
