/* Forced into every C++ file of the armv7 build (CXXFLAGS_armv7_unknown_linux_gnueabihf):
 * librocksdb-sys always defines HAVE_UINT128_EXTENSION, but 32-bit ARM compilers (gcc and
 * clang) have no __uint128_t. RocksDB falls back to portable 64-bit arithmetic without it. */
#undef HAVE_UINT128_EXTENSION
