// Loads plugin_unload.cpp's module (argv[1]), whose copy of livealloc gives a thread a heap and
// so arms its thread-exit destructor, dlcloses the module while that thread still runs, and then
// lets the thread end: the destructor must still be there (the copy keeps its object loaded).
// Exits 0 when the thread ended and the process is whole; it died with SIGSEGV before.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <string.h>

static sem_t worked, closed;
static int (*work)(void);
static int work_failed;

static void* thread_main(void* arg) {
  (void)arg;
  work_failed = work();
  sem_post(&worked);
  sem_wait(&closed);
  return NULL;  // the key destructors of the plugin's copy run now
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
    return 2;
  }
  void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!plugin) {
    fprintf(stderr, "plugin_unload: dlopen: %s\n", dlerror());
    return 1;
  }
  void* sym = dlsym(plugin, "plugin_unload_work");
  if (!sym) {
    fprintf(stderr, "plugin_unload: dlsym: %s\n", dlerror());
    return 1;
  }
  memcpy(&work, &sym, sizeof work);  // ISO C has no cast from object to function pointer
  sem_init(&worked, 0, 0);
  sem_init(&closed, 0, 0);
  pthread_t thread;
  if (pthread_create(&thread, NULL, thread_main, NULL) != 0) return 1;
  sem_wait(&worked);
  dlclose(plugin);
  const int loaded = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD) != NULL;
  sem_post(&closed);
  pthread_join(thread, NULL);
  if (work_failed) {
    fprintf(stderr, "plugin_unload: the plugin's allocation failed\n");
    return 1;
  }
  printf("plugin_unload: the thread ended after dlclose; the plugin %s\n",
         loaded ? "stayed loaded" : "was unloaded");
  return 0;
}
