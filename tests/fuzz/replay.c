/* Runs saved fuzz inputs through the fuzz target without libFuzzer, so the
 * regression corpus replays with any C compiler (the test suite uses gcc
 * with AddressSanitizer and UndefinedBehaviorSanitizer):
 *
 *   replay FILE...
 *
 * Exit 0: all ran (the count goes to stdout). A check of the target that
 * fails aborts, after the name of the input is written to stderr. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *current;

static void on_abort(int sig)
{
    static const char msg[] = "replay: a check failed on input ";
    if (write(2, msg, sizeof msg - 1) < 0 || write(2, current, strlen(current)) < 0 || write(2, "\n", 1) < 0)
        _exit(3);
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv)
{
    signal(SIGABRT, on_abort);
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f)
            return 2;
        static uint8_t buf[1 << 16];
        const size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        current = argv[i];
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("replay: %d inputs\n", argc - 1);
    return 0;
}
