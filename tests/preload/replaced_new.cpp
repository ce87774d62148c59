// A program that replaces only the base forms of operator new and delete, as C++17 allows
// ([replacement.functions]): new(size), new(size, align), delete(ptr), delete(ptr, align). Run
// under LD_PRELOAD=liblivealloc.so, every other form (arrays, nothrow, sized deletes) is the
// library's, and must go through these, as the defaults do ([new.delete]). Its blocks come from
// a static pool, so one freed by the library's free would crash or corrupt it. Prints the counts
// and exits 0 when every form went through the program's operators.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {
alignas(64) unsigned char pool[1 << 20];
std::size_t used = 0;
int news = 0, deletes = 0;

void* take(std::size_t n, std::size_t align) {
  used = (used + align - 1) & ~(align - 1);
  if (used + n > sizeof pool) throw std::bad_alloc();
  void* p = pool + used;
  used += n ? n : 1;
  ++news;
  return p;
}
void give(void* p) {
  if (!p) return;
  auto* b = static_cast<unsigned char*>(p);
  if (b < pool || b >= pool + sizeof pool) {
    std::fprintf(stderr, "replaced_new: delete of %p, which the program's new did not return\n", p);
    std::abort();
  }
  ++deletes;
}

struct S {
  long v[4];
};
struct alignas(64) A {
  long v[16];
};
}  // namespace

// Leaving the sized deletes to the defaults is the point here.
#pragma GCC diagnostic ignored "-Wsized-deallocation"
void* operator new(std::size_t n) { return take(n, 16); }
void* operator new(std::size_t n, std::align_val_t a) {
  return take(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { give(p); }
void operator delete(void* p, std::align_val_t) noexcept { give(p); }

int main() {
  int* a = new int[10];  // new[] -> new
  delete[] a;            // delete[] -> delete
  S* s = new S;
  delete s;  // sized delete -> delete
  S* sa = new S[3];
  delete[] sa;  // delete[] -> delete (S destructs trivially: no array cookie, no size)
  void* q = ::operator new[](24);
  ::operator delete[](q, 24);  // sized delete[] -> delete[] -> delete
  q = ::operator new(5, std::nothrow);
  ::operator delete(q, std::nothrow);
  q = ::operator new[](7, std::nothrow);
  ::operator delete[](q, std::nothrow);
  A* al = new A;  // new(size, align)
  delete al;      // sized aligned delete -> delete(ptr, align)
  A* ala = new A[2];
  delete[] ala;  // new[](size, align) -> new(size, align);
                 // delete[](ptr, align) -> delete(ptr, align)
  q = ::operator new[](256, std::align_val_t(64));
  // sized aligned delete[] -> delete[](ptr, align) -> delete(ptr, align)
  ::operator delete[](q, 256, std::align_val_t(64));
  q = ::operator new(100, std::align_val_t(128), std::nothrow);
  ::operator delete(q, std::align_val_t(128), std::nothrow);
  q = ::operator new[](100, std::align_val_t(128), std::nothrow);
  ::operator delete[](q, std::align_val_t(128), std::nothrow);
  void* m = std::malloc(1000);  // malloc stays the library's (or glibc's)
  std::memset(m, 1, 1000);
  std::free(m);
  std::printf("news=%d deletes=%d\n", news, deletes);
  return news == 11 && deletes == 11 ? 0 : 1;
}
