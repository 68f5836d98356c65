// record_heap_target_cxx.cpp — the C++ program of the heap profiling tests:
// every operator new and delete the preload library interposes (plain,
// array, nothrow, aligned, sized) from cxx_temp, which frees all it
// allocates, and cxx_leak, which keeps 8 MiB of std::vector<char> and
// new[] blocks, and cxx_before_main, which keeps 4 MiB allocated by a static
// initializer, before main. Prints "truth leak=N" and "ok" when every object
// held its contents and alignment.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#define NOINLINE __attribute__((noinline, noipa))

struct alignas(128) Wide {
    char bytes[300];
};

struct Node {
    Node *next;
    char payload[40];
};

static std::vector<std::vector<char> *> g_kept;

// One block of at least the sampling interval: always sampled, at its size.
NOINLINE char *cxx_before_main() {
    char *block = new char[4u << 20];
    std::memset(block, 1, 4u << 20);
    return block;
}

char *g_before_main = cxx_before_main();
static std::vector<char *> g_kept_arrays;

NOINLINE bool cxx_temp(unsigned round) {
    Node *head = nullptr;
    for (unsigned i = 0; i < 64; i++) {
        Node *n = new Node;
        std::memset(n->payload, int(i + round), sizeof n->payload);
        n->next = head;
        head = n;
    }
    bool ok = true;
    for (unsigned i = 64; head; i--) {
        Node *n = head;
        ok = ok && n->payload[0] == char(i - 1 + round);
        head = n->next;
        delete n;
    }
    char *array = new char[1000 + round % 500];
    array[0] = 1;
    delete[] array;
    Wide *w = new Wide;
    ok = ok && (reinterpret_cast<std::uintptr_t>(w) & 127) == 0;
    delete w;
    Wide *ws = new Wide[3];
    ok = ok && (reinterpret_cast<std::uintptr_t>(ws) & 127) == 0;
    delete[] ws;
    int *nothrow = new (std::nothrow) int[50];
    ok = ok && nothrow;
    delete[] nothrow;
    std::vector<int> grows;
    for (int i = 0; i < 2000; i++) grows.push_back(i);
    return ok && grows[1999] == 1999;
}

NOINLINE std::size_t cxx_leak() {
    std::size_t bytes = 0;
    while (bytes < (8u << 20)) {
        std::size_t n = 512 + bytes % 1024;
        g_kept.push_back(new std::vector<char>(n, 'x'));
        bytes += sizeof(std::vector<char>) + n;
        char *a = new char[n / 2];
        a[0] = 'y';
        g_kept_arrays.push_back(a);
        bytes += n / 2;
    }
    return bytes;
}

int main() {
    bool ok = true;
    for (unsigned round = 0; round < 3000; round++) ok = cxx_temp(round) && ok;
    std::size_t leak = cxx_leak();
    std::printf("truth leak=%zu\n%s\n", leak, ok ? "ok" : "failed");
    return ok ? 0 : 1;
}
