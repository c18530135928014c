/* The library's version, as compiled: a program built against one header can
 * ask which library it was loaded with (pyrope.h, "version"). */
#include "pyrope.h"

int rope_version(void) { return ROPE_VERSION; }

int rope_abi_version(void) { return ROPE_ABI_VERSION; }
