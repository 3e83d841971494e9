/*
 * One stand-in library of the driver's user space (libc_sec.so,
 * libmmpa.so, libdrvdsmi_host.so, libascend_hal.so, libdsmi_network.so):
 * it exists so that npu-smi links against the same set of libraries as
 * the vendor's (hicann/driver main, src/custom/dev_prod/user/npucli/
 * CMakeLists.txt, target_link_libraries(npu-smi ...)) and the loader
 * needs every one of them at its real place. LIBSYM names its one symbol.
 */
int LIBSYM(void) { return 0; }
