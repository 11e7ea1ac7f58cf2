/* CPU-only NVTX workload for machines without a GPU.
 *
 * It mirrors the NVTX structure of workloads/ (a "Total Elapsed Time(3 batches)" range
 * around three "infer" + "Print Result" pairs) with host work and OS runtime calls only,
 * so that an Nsight Systems that cannot trace CUDA (Debian's 2022.4 here) still records
 * a real export of its own schema: push/pop ranges, start/end ranges, marks, a named
 * domain, registered strings and a category.  See workloads/cpu/README.md.
 *
 * Build: gcc -O1 -I<nvtx3 include dir> cpu_ladder.c -o cpu_ladder -ldl
 */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

static volatile unsigned long long sink;

static void spin_ms(double ms) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < 1000; ++i) sink += (unsigned long long)i * i;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6 < ms);
}

static nvtxEventAttributes_t ascii_attrs(const char *msg) {
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = msg;
    return a;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    int batches = argc > 1 ? atoi(argv[1]) : 3;
    nvtxDomainHandle_t dom = nvtxDomainCreateA("nsysan.cpu");
    nvtxStringHandle_t s_infer = nvtxDomainRegisterStringA(dom, "preprocess");
    nvtxNameCategoryA(7, "io");

    /* setup: one-time work before the timed loop */
    nvtxRangePushA("setup");
    char *buf = malloc(1 << 20);
    memset(buf, 1, 1 << 20);
    spin_ms(3);
    nvtxRangePop();

    char title[64];
    snprintf(title, sizeof title, "Total Elapsed Time(%d batches)", batches);
    nvtxRangePushA(title);
    for (int b = 0; b < batches; ++b) {
        nvtxEventAttributes_t a = ascii_attrs("infer");
        a.colorType = NVTX_COLOR_ARGB;
        a.color = 0xff00a0ff;
        nvtxRangePushEx(&a);

        nvtxEventAttributes_t p = {0};
        p.version = NVTX_VERSION;
        p.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        p.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        p.message.registered = s_infer;
        nvtxDomainRangePushEx(dom, &p);
        spin_ms(2);
        nvtxDomainRangePop(dom);

        spin_ms(4 + b);          /* the "inference" itself, on the CPU */
        sleep_ms(2);             /* an OS runtime call inside the range */
        nvtxRangePop();

        nvtxRangePushA("Print Result");
        int fd = open("/dev/null", O_WRONLY);
        for (int i = 0; i < 64; ++i) {
            if (write(fd, buf, 4096) < 0) break;
        }
        close(fd);
        printf("batch %d done\n", b);
        fflush(stdout);
        sleep_ms(1);
        nvtxRangePop();
    }
    nvtxRangePop();

    nvtxMarkA("done");
    nvtxRangeId_t r = nvtxRangeStartA("teardown (start/end)");
    nvtxEventAttributes_t c = ascii_attrs("flush <io> & \"quotes\"");
    c.category = 7;
    nvtxMarkEx(&c);
    free(buf);
    sleep_ms(1);
    nvtxRangeEnd(r);
    nvtxDomainDestroy(dom);
    return 0;
}
