/* Runs saved fuzz inputs through the fuzz target without libFuzzer, so the
 * regression corpus replays with any C compiler (the test suite uses gcc
 * with AddressSanitizer and UndefinedBehaviorSanitizer). Exit 0: all ran. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f)
            return 2;
        uint8_t buf[1 << 16];
        const size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
    }
    return 0;
}
