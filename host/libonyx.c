/* libonyx.so is onyx_core linked whole; this file only gives the target a source. */
typedef int ox_libonyx_stub_unused;
