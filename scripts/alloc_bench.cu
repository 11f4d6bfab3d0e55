// alloc_bench.cu — times real GPU allocators on an operation stream.
//
//   alloc_bench [-r REPEATS] [-d DEVICE] STREAM
//
// STREAM is a text file, one operation a line: "a ID SIZE" allocates SIZE
// bytes and names the block ID, "f ID" frees it; blank lines and lines
// starting with '#' are skipped. gpumem writes such files from a trace; the
// build script can also generate a synthetic one.
//
// Each allocator replays the whole stream; the time covers every operation
// (and, for the stream-ordered allocator, the final synchronisation), so the
// figure is ns per operation, allocations and frees alike. Blocks the
// stream leaves live are freed afterwards, outside the timing. One line per
// allocator on stdout:
//
//   name ns_per_op peak_bytes
//
// peak_bytes is the device memory the allocator held at its peak: for
// cuMemAlloc the rise of cuMemGetInfo's used memory (sampled in a second,
// untimed replay), for the pool its reserved-memory high-water mark, for
// PyTorch its reserved_bytes peak; "-" where it could not be measured.
// With -r N > 1 each allocator replays the stream N times without
// releasing its cache, and a "name/warm" line gives the mean of the later
// passes. Requests of 0 bytes are counted but allocate nothing, as PyTorch
// does.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <c10/cuda/CUDACachingAllocator.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct Op {
  bool alloc;
  uint32_t slot;  // dense index of the block
  uint64_t size;
};

struct Stream {
  std::vector<Op> ops;
  uint32_t slots = 0;
  uint64_t allocs = 0, live_peak = 0;
};

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "alloc_bench: %s\n", msg.c_str());
  std::exit(2);
}

Stream parse(const char *path) {
  std::ifstream in(path);
  if (!in) die(std::string("cannot open ") + path);
  Stream s;
  std::unordered_map<uint64_t, uint32_t> live;  // id -> slot
  std::vector<uint32_t> free_slots;
  std::vector<uint64_t> slot_size;
  uint64_t live_bytes = 0;
  std::string line;
  for (size_t ln = 1; std::getline(in, line); ln++) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string kind, extra;
    uint64_t id = 0, size = 0;
    auto where = [&](const char *what) {
      return std::string(path) + ":" + std::to_string(ln) + ": " + what + ": " + line;
    };
    if (!(ls >> kind >> id)) die(where("want \"a ID SIZE\" or \"f ID\""));
    if (kind == "a") {
      if (!(ls >> size)) die(where("allocation without a size"));
      if (ls >> extra) die(where("trailing text"));
      if (live.count(id)) die(where("id already live"));
      uint32_t slot;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        slot = s.slots++;
        slot_size.push_back(0);
      }
      live[id] = slot;
      slot_size[slot] = size;
      s.ops.push_back({true, slot, size});
      s.allocs++;
      live_bytes += size;
      if (live_bytes > s.live_peak) s.live_peak = live_bytes;
    } else if (kind == "f") {
      if (ls >> extra) die(where("trailing text"));
      auto it = live.find(id);
      if (it == live.end()) die(where("free of an id that is not live"));
      s.ops.push_back({false, it->second, 0});
      live_bytes -= slot_size[it->second];
      free_slots.push_back(it->second);
      live.erase(it);
    } else {
      die(where("unknown operation"));
    }
  }
  if (s.ops.empty()) die(std::string(path) + ": no operations");
  return s;
}

using Clock = std::chrono::steady_clock;

// An allocator under test: alloc returns false (and sets err) on failure.
struct Allocator {
  virtual ~Allocator() = default;
  virtual const char *name() const = 0;
  virtual bool alloc(uint64_t size, void **p, std::string &err) = 0;
  virtual void release(void *p) = 0;
  virtual void sync() {}
  virtual int64_t peak() { return -1; }  // -1: unknown
};

// Replays the stream once; returns ns per op, or a negative value on failure.
double replay(Allocator &a, const Stream &s, std::vector<void *> &ptr) {
  std::string err;
  auto t0 = Clock::now();
  for (size_t i = 0; i < s.ops.size(); i++) {
    const Op &op = s.ops[i];
    if (op.alloc) {
      ptr[op.slot] = nullptr;
      if (op.size != 0 && !a.alloc(op.size, &ptr[op.slot], err)) {
        std::fprintf(stderr, "alloc_bench: %s: op %zu (%" PRIu64 " bytes): %s\n", a.name(), i,
                     op.size, err.c_str());
        for (size_t j = 0; j < i; j++)  // free what is still live
          if (s.ops[j].alloc && ptr[s.ops[j].slot]) {
            a.release(ptr[s.ops[j].slot]);
            ptr[s.ops[j].slot] = nullptr;
          }
        return -1;
      }
    } else if (ptr[op.slot]) {
      a.release(ptr[op.slot]);
      ptr[op.slot] = nullptr;
    }
  }
  a.sync();
  auto t1 = Clock::now();
  for (auto &p : ptr)
    if (p) {
      a.release(p);
      p = nullptr;
    }
  a.sync();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / (double)s.ops.size();
}

void run(Allocator &a, const Stream &s, int repeats) {
  std::vector<void *> ptr(s.slots, nullptr);
  double first = replay(a, s, ptr), warm = 0;
  int nwarm = 0;
  for (int r = 1; r < repeats && first >= 0; r++) {
    double t = replay(a, s, ptr);
    if (t < 0) break;
    warm += t;
    nwarm++;
  }
  int64_t pk = first >= 0 ? a.peak() : -1;
  char pks[32] = "-";
  if (pk >= 0) std::snprintf(pks, sizeof pks, "%" PRId64, pk);
  if (first < 0)
    std::printf("%s - -\n", a.name());
  else
    std::printf("%s %.1f %s\n", a.name(), first, pks);
  if (nwarm > 0) std::printf("%s/warm %.1f %s\n", a.name(), warm / nwarm, pks);
  std::fflush(stdout);
}

std::string cuda_err(cudaError_t e) { return std::string(cudaGetErrorString(e)); }

// The driver, as an application without a caching layer uses it.
struct RawDriver : Allocator {
  CUresult (*mem_alloc)(CUdeviceptr *, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*mem_info)(size_t *, size_t *) = nullptr;
  CUresult (*err_string)(CUresult, const char **) = nullptr;
  const Stream *stream = nullptr;  // for the sampling replay in peak()
  bool sampling = false;
  size_t peak_used = 0;

  template <class F>
  static void sym(void *h, const char *name, F &f) {
    void *p = dlsym(h, name);
    if (!p) die(std::string("libcuda.so.1 lacks ") + name);
    std::memcpy(&f, &p, sizeof p);
  }
  RawDriver() {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) die("libcuda.so.1 not found: no nvidia driver");
    sym(h, "cuMemAlloc_v2", mem_alloc);
    sym(h, "cuMemFree_v2", mem_free);
    sym(h, "cuMemGetInfo_v2", mem_info);
    sym(h, "cuGetErrorString", err_string);
  }
  const char *name() const override { return "cuMemAlloc"; }
  size_t used() {
    size_t f = 0, t = 0;
    mem_info(&f, &t);
    return t - f;
  }
  bool alloc(uint64_t size, void **p, std::string &err) override {
    CUdeviceptr d = 0;
    CUresult rc = mem_alloc(&d, size);
    if (rc != CUDA_SUCCESS) {
      const char *s = "unknown error";
      err_string(rc, &s);
      err = s;
      return false;
    }
    *p = reinterpret_cast<void *>(d);
    if (sampling) {
      size_t u = used();
      if (u > peak_used) peak_used = u;
    }
    return true;
  }
  void release(void *p) override { mem_free(reinterpret_cast<CUdeviceptr>(p)); }
  // The rise of device use over the stream, from an untimed replay that
  // samples cuMemGetInfo after every allocation.
  int64_t peak() override;
};

int64_t RawDriver::peak() {
  if (!stream || stream->allocs > 500000) return -1;  // sampling would take too long
  std::vector<void *> ptr(stream->slots, nullptr);
  size_t base = used();
  peak_used = base;
  sampling = true;
  double t = replay(*this, *stream, ptr);
  sampling = false;
  return t < 0 ? -1 : (int64_t)(peak_used - base);
}

// cudaMallocAsync on a pool that keeps everything it obtains.
struct AsyncPool : Allocator {
  cudaMemPool_t pool{};
  cudaStream_t stream{};
  explicit AsyncPool(int dev) {
    cudaMemPoolProps props;
    std::memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    cudaError_t e = cudaMemPoolCreate(&pool, &props);
    if (e != cudaSuccess) die("cudaMemPoolCreate: " + cuda_err(e));
    uint64_t keep = UINT64_MAX;
    e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    if (e != cudaSuccess) die("cudaMemPoolSetAttribute: " + cuda_err(e));
    e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) die("cudaStreamCreate: " + cuda_err(e));
  }
  ~AsyncPool() override {
    cudaStreamSynchronize(stream);
    cudaMemPoolTrimTo(pool, 0);
    cudaMemPoolDestroy(pool);
    cudaStreamDestroy(stream);
  }
  const char *name() const override { return "cudaMallocAsync"; }
  bool alloc(uint64_t size, void **p, std::string &err) override {
    cudaError_t e = cudaMallocFromPoolAsync(p, size, pool, stream);
    if (e != cudaSuccess) {
      cudaGetLastError();
      err = cuda_err(e);
      return false;
    }
    return true;
  }
  void release(void *p) override { cudaFreeAsync(p, stream); }
  void sync() override { cudaStreamSynchronize(stream); }
  int64_t peak() override {
    uint64_t v = 0;
    if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &v) != cudaSuccess) return -1;
    return (int64_t)v;
  }
};

namespace cca = c10::cuda::CUDACachingAllocator;

// PyTorch's CUDA caching allocator, as torch.empty reaches it.
struct Torch : Allocator {
  int dev;
  explicit Torch(int d, int count) : dev(d) {
    cca::init(count);
    cca::resetPeakStats((c10::DeviceIndex)dev);
  }
  ~Torch() override { cca::emptyCache(); }
  const char *name() const override { return "torch"; }
  bool alloc(uint64_t size, void **p, std::string &err) override {
    try {
      *p = cca::raw_alloc(size);
      return true;
    } catch (const std::exception &e) {
      err = e.what();
      err = err.substr(0, err.find('\n'));
      return false;
    }
  }
  void release(void *p) override { cca::raw_delete(p); }
  int64_t peak() override {
    return cca::getDeviceStats((c10::DeviceIndex)dev).reserved_bytes[0].peak;
  }
};

void usage() {
  std::fprintf(stderr, "usage: alloc_bench [-r REPEATS] [-d DEVICE] STREAM\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char **argv) {
  int repeats = 1, dev = 0;
  const char *path = nullptr;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "-r") && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "-d") && i + 1 < argc)
      dev = std::atoi(argv[++i]);
    else if (argv[i][0] == '-' || path)
      usage();
    else
      path = argv[i];
  }
  if (!path || repeats < 1) usage();
  Stream s = parse(path);

  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) die("no cuda device: " + cuda_err(e));
  if (dev < 0 || dev >= count) die("device " + std::to_string(dev) + " not found");
  if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaFree(nullptr)) != cudaSuccess)
    die("cuda init: " + cuda_err(e));
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, dev);
  std::fprintf(stderr, "alloc_bench: %s: %zu ops, %" PRIu64 " allocations, live peak %" PRIu64
               " bytes; device %d %s; %d pass(es)\n",
               path, s.ops.size(), s.allocs, s.live_peak, dev, prop.name, repeats);
  std::printf("# name ns_per_op peak_bytes (stream: %zu ops, live peak %" PRIu64 ")\n", s.ops.size(),
              s.live_peak);

  {
    RawDriver raw;
    raw.stream = &s;
    run(raw, s, repeats);
  }
  {
    AsyncPool pool(dev);
    run(pool, s, repeats);
  }
  {
    Torch t(dev, count);
    run(t, s, repeats);
  }
  return 0;
}
