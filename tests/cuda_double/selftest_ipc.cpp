// selftest_ipc.cpp: tests of the CUDA TEST DOUBLES (cuda_double.hpp): sharing
// pool memory between processes (the arenas of exportable pools, pool and
// pointer exports and imports), legacy IPC open/close and
// cuMemGetAddressRange, through both APIs, with the answers an H200 (driver
// 580, CUDA 13.0) was measured to give. Two real processes share bytes in
// CudaDouble.TwoProcessesSharePoolMemory: the child is this program again
// (fork + exec, as a real CUDA program must be), running IpcChild.*, which
// only runs there (CMake's filter leaves it out).
//
// CMake runs each suite in the configuration it is about (see
// selftest_support.hpp and tests/cuda_double/CMakeLists.txt).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "selftest_support.hpp"

namespace {

using namespace selftest;

constexpr std::size_t mib = std::size_t{1} << 20;

// An exportable pool (POSIX file descriptor), made with the driver API.
CUmemoryPool posix_pool(int device = 0)
{
  CUmemoryPool pool = nullptr;
  auto const props = driver_pool_props(device, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  return pool;
}

int export_fd(CUmemoryPool pool)
{
  int fd = -1;
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  return fd;
}

void* fd_handle(int fd) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)); }

CUmemoryPool import_fd(int fd)
{
  CUmemoryPool pool = nullptr;
  EXPECT_EQ(cuMemPoolImportFromShareableHandle(&pool, fd_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  return pool;
}

CUdeviceptr pool_alloc(CUmemoryPool pool, std::size_t size)
{
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocFromPoolAsync(&p, size, pool, nullptr), CUDA_SUCCESS);
  return p;
}

CUmemPoolPtrExportData export_pointer(CUdeviceptr p)
{
  CUmemPoolPtrExportData data{};
  EXPECT_EQ(cuMemPoolExportPointer(&data, p), CUDA_SUCCESS);
  return data;
}

std::vector<unsigned char> pattern(std::size_t size, unsigned seed)
{
  std::vector<unsigned char> bytes(size);
  for (std::size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<unsigned char>((i * 31 + seed) & 0xff);
  }
  return bytes;
}

std::vector<unsigned char> read_device(CUdeviceptr p, std::size_t size)
{
  std::vector<unsigned char> bytes(size);
  EXPECT_EQ(cuMemcpyDtoH_v2(bytes.data(), p, size), CUDA_SUCCESS);
  return bytes;
}

std::string to_hex(void const* data, std::size_t size)
{
  std::string out;
  for (std::size_t i = 0; i < size; ++i) {
    char digits[3];
    std::snprintf(digits, sizeof digits, "%02x", static_cast<unsigned char const*>(data)[i]);
    out += digits;
  }
  return out;
}

bool from_hex(char const* text, void* out, std::size_t size)
{
  if (text == nullptr || std::strlen(text) != 2 * size) { return false; }
  auto* bytes = static_cast<unsigned char*>(out);
  for (std::size_t i = 0; i < size; ++i) {
    char digits[3] = {text[2 * i], text[2 * i + 1], '\0'};
    char* end = nullptr;
    bytes[i] = static_cast<unsigned char>(std::strtoul(digits, &end, 16));
    if (end != digits + 2) { return false; }
  }
  return true;
}

// ------------------------------------------------------------ CudaDouble: arenas

TEST_F(CudaDouble, ExportablePoolsAllocateFromAReusedArena)
{
  CUmemoryPool pool = posix_pool();
  // The accounting is as for any pool: 2 MiB steps.
  CUdeviceptr a = pool_alloc(pool, 1000);
  CUdeviceptr b = pool_alloc(pool, 1000);
  EXPECT_EQ(a % 256, 0u);
  EXPECT_EQ(b % 256, 0u);
  EXPECT_EQ(b - a, 1024u);  // one arena, the next 256-byte step
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * mib);
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 2000u);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(a)), 2);
  // A freed block is reused (first fit), and freed neighbours coalesce.
  EXPECT_EQ(cuMemFreeAsync(a, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(pool_alloc(pool, 256), a);
  EXPECT_EQ(cuMemFreeAsync(a, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(b, nullptr), CUDA_SUCCESS);
  CUdeviceptr const big = pool_alloc(pool, 2048);
  EXPECT_EQ(big, a);
  EXPECT_EQ(cuMemFreeAsync(big, nullptr), CUDA_SUCCESS);
  // Alloc/free cycles never run out, far past the arena's size in total.
  for (int i = 0; i < 64; ++i) {
    CUdeviceptr p = pool_alloc(pool, 512 * mib);
    ASSERT_NE(p, 0u) << i;
    EXPECT_EQ(p, a) << i;
    EXPECT_EQ(cuMemsetD8_v2(p + 4096 * i, static_cast<unsigned char>(i), 4096), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  }
  // The data survives in the arena like in any allocation.
  CUdeviceptr c = pool_alloc(pool, 4096);
  auto const bytes = pattern(4096, 7);
  EXPECT_EQ(cuMemcpyHtoD_v2(c, bytes.data(), bytes.size()), CUDA_SUCCESS);
  EXPECT_EQ(read_device(c, bytes.size()), bytes);
  EXPECT_EQ(cuMemFreeAsync(c, nullptr), CUDA_SUCCESS);
  // A trim gives the whole reservation back.
  EXPECT_EQ(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 0u);
}

TEST_F(CudaDouble, RuntimePoolsWithPosixHandlesUseArenasToo)
{
  cudaMemPool_t pool = nullptr, plain = nullptr;
  auto props = device_pool_props(0, cudaMemHandleTypePosixFileDescriptor);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&plain, &props), cudaSuccess);
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 100, pool, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaMallocFromPoolAsync(&q, 100, plain, cudaStreamLegacy), cudaSuccess);
  // Its exported descriptor is the file the allocation lives in: mapping it
  // shows the bytes written through the runtime.
  int fd = -1;
  ASSERT_EQ(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0), cudaSuccess);
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  std::size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), total);  // the device's memory, sparse
  EXPECT_LT(static_cast<std::uint64_t>(st.st_blocks) * 512, 64 * mib);
  EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  auto const bytes = pattern(100, 3);
  ASSERT_EQ(cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  void* const map = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  // At offset 0: the first block of a new pool's arena.
  EXPECT_EQ(std::memcmp(map, bytes.data(), bytes.size()), 0);
  EXPECT_EQ(munmap(map, static_cast<std::size_t>(st.st_size)), 0);
  EXPECT_EQ(close(fd), 0);
  EXPECT_EQ(cudaFreeAsync(p, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(q, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(plain), cudaSuccess);
}

// ------------------------------------------------------------ CudaDouble: imports in one process

TEST_F(CudaDouble, PoolImportsFromShareableHandles)
{
  CUmemoryPool pool = posix_pool();
  int const fd = export_fd(pool);
  // Importing its own pool in the exporting process works (as measured).
  CUmemoryPool imported = import_fd(fd);
  ASSERT_NE(imported, nullptr);
  EXPECT_NE(imported, pool);
  // The descriptor may be closed at once; the same arena again: the same pool.
  EXPECT_EQ(close(fd), 0);
  int const fd2 = export_fd(pool);
  EXPECT_EQ(import_fd(fd2), imported);
  std::thread([&] {  // on another thread, with the context made current there
    ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
    EXPECT_EQ(import_fd(fd2), imported);
  })
    .join();

  // Wrong handle types, flags, outputs and descriptors: INVALID_VALUE.
  CUmemoryPool untouched = nullptr;
  EXPECT_EQ(cuMemPoolImportFromShareableHandle(&untouched, fd_handle(fd2), CU_MEM_HANDLE_TYPE_FABRIC, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolImportFromShareableHandle(&untouched, fd_handle(fd2), CU_MEM_HANDLE_TYPE_NONE, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolImportFromShareableHandle(&untouched, fd_handle(fd2), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolImportFromShareableHandle(nullptr, fd_handle(fd2), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  int const event = eventfd(0, EFD_CLOEXEC);  // what the doubles used to hand out
  int const other_memfd = memfd_create("not_an_arena", MFD_CLOEXEC);
  ASSERT_GE(event, 0);
  ASSERT_GE(other_memfd, 0);
  ASSERT_EQ(ftruncate(other_memfd, 1 << 20), 0);
  int const closed = dup(fd2);
  ASSERT_EQ(close(closed), 0);
  for (int bad : {-1, event, other_memfd, closed}) {
    EXPECT_EQ(
      cuMemPoolImportFromShareableHandle(&untouched, fd_handle(bad), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      CUDA_ERROR_INVALID_VALUE)
      << bad;
  }
  EXPECT_EQ(untouched, nullptr);
  EXPECT_EQ(close(event), 0);
  EXPECT_EQ(close(other_memfd), 0);
  // Without a current context: none to import it on.
  std::thread([&] {
    EXPECT_EQ(
      cuMemPoolImportFromShareableHandle(&untouched, fd_handle(fd2), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      CUDA_ERROR_INVALID_CONTEXT);
  }).join();

  // What an imported pool cannot do: attributes (as measured), allocations
  // (cuda.h), another export.
  std::uint64_t value = 0;
  EXPECT_EQ(cuMemPoolGetAttribute(imported, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolGetAttribute(imported, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocFromPoolAsync(&p, 64, imported, nullptr), CUDA_ERROR_INVALID_VALUE);
  int again = -1;
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&again, imported, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(again, -1);
  // The runtime's goes through the driver.
  cudaMemPool_t rt = nullptr;
  EXPECT_EQ(cudaMemPoolImportFromShareableHandle(&rt, fd_handle(fd2), cudaMemHandleTypePosixFileDescriptor, 0),
            cudaSuccess);
  EXPECT_EQ(reinterpret_cast<CUmemoryPool>(rt), imported);
  EXPECT_EQ(cudaMemPoolImportFromShareableHandle(&rt, fd_handle(-1), cudaMemHandleTypePosixFileDescriptor, 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemPoolGetAttribute(rt, cudaMemPoolAttrUsedMemCurrent, &value), cudaErrorInvalidValue);
  auto c = cuda_double_get_counters();
  EXPECT_EQ(c.pool_handle_imports, 4u);  // the same pool again counts
  EXPECT_EQ(c.pool_handle_exports, 2u);
  EXPECT_EQ(c.failed_calls, 4u + 4u + 1u + 4u + 2u);

  // An imported pool can be destroyed; the arena can then be imported anew.
  EXPECT_EQ(cuMemPoolDestroy(imported), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolGetAttribute(imported, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value), CUDA_ERROR_INVALID_VALUE);
  CUmemoryPool const anew = import_fd(fd2);
  EXPECT_NE(anew, imported);
  EXPECT_EQ(cuMemPoolDestroy(anew), CUDA_SUCCESS);
  EXPECT_EQ(close(fd2), 0);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
}

TEST_F(CudaDouble, ImportedMemoryLivesOnTheExportersDevice)
{
  if (devices_ < 2) { GTEST_SKIP() << "one device"; }
  // A pool of device 1, imported while device 0's context is current: the
  // memory is still device 1's, and device 0 has no access until it is given.
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  CUmemoryPool pool = posix_pool(1);
  CUdeviceptr a = pool_alloc(pool, 4096);
  int const fd = export_fd(pool);
  CUmemPoolPtrExportData data = export_pointer(a);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  CUmemoryPool imported = import_fd(fd);
  EXPECT_EQ(close(fd), 0);
  CUdeviceptr q = 0;
  ASSERT_EQ(cuMemPoolImportPointer(&q, imported, &data), CUDA_SUCCESS);
  int ordinal = -1;
  EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, q), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  cudaPointerAttributes attributes{};
  EXPECT_EQ(cudaPointerGetAttributes(&attributes, as_pointer(q)), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attributes.device, 1);
  auto const rt_imported = reinterpret_cast<cudaMemPool_t>(imported);
  EXPECT_EQ(cuda_double_pool_access(rt_imported, 1), 3);  // read-write
  EXPECT_EQ(cuda_double_pool_access(rt_imported, 0), 0);  // none
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(cuMemPoolSetAccess(imported, &access, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pool_access(rt_imported, 0), 3);  // read-write
  // The same bytes as the exporter's.
  auto const bytes = pattern(4096, 3);
  ASSERT_EQ(cuMemcpyHtoD_v2(q, bytes.data(), bytes.size()), CUDA_SUCCESS);
  EXPECT_EQ(read_device(a, bytes.size()), bytes);
  EXPECT_EQ(cuMemFree_v2(q), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(imported), CUDA_SUCCESS);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cuMemFreeAsync(a, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 0u);
}

TEST_F(CudaDouble, PointerImportsShareTheExportersBytes)
{
  CUmemoryPool pool = posix_pool();
  CUdeviceptr early = pool_alloc(pool, 512);
  CUmemPoolPtrExportData before = export_pointer(early);  // made before the pool was exported
  int const fd = export_fd(pool);
  CUmemoryPool imported = import_fd(fd);
  EXPECT_EQ(close(fd), 0);
  CUdeviceptr a = pool_alloc(pool, 4096);
  CUmemPoolPtrExportData data = export_pointer(a);
  CUmemPoolPtrExportData const early_after = export_pointer(early);
  EXPECT_NE(std::memcmp(&before, &early_after, sizeof before), 0);  // the data says whether it can be imported

  std::size_t const free_before = driver_free_memory();
  CUdeviceptr q = 0;
  ASSERT_EQ(cuMemPoolImportPointer(&q, imported, &data), CUDA_SUCCESS);
  ASSERT_NE(q, 0u);
  EXPECT_NE(q, a);                               // another mapping of the same bytes
  EXPECT_EQ(driver_free_memory(), free_before);  // imported memory counts for nothing here
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(q)), 4);
  EXPECT_EQ(cuda_double_pointer_pool(as_pointer(q)), reinterpret_cast<cudaMemPool_t>(imported));
  EXPECT_EQ(cuda_double_imported_allocations(), 1);
  // The same bytes, both ways, through both APIs.
  auto const mine = pattern(4096, 1);
  ASSERT_EQ(cuMemcpyHtoD_v2(a, mine.data(), mine.size()), CUDA_SUCCESS);
  EXPECT_EQ(read_device(q, mine.size()), mine);
  auto const theirs = pattern(4096, 2);
  ASSERT_EQ(cudaMemcpy(as_pointer(q), theirs.data(), theirs.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(read_device(a, theirs.size()), theirs);
  ASSERT_EQ(cudaMemset(as_pointer(q + 100), 0xab, 10), cudaSuccess);
  EXPECT_EQ(read_device(a + 100, 10), std::vector<unsigned char>(10, 0xab));
  EXPECT_EQ(cuMemcpyHtoD_v2(q + 4000, mine.data(), 200), CUDA_ERROR_INVALID_VALUE);  // past its end
  CUdeviceptr range = 0;
  EXPECT_EQ(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, q + 10), CUDA_SUCCESS);
  EXPECT_EQ(range, q);

  // The same data again: the same pointer, no reference count (as measured).
  CUdeviceptr q2 = 0;
  ASSERT_EQ(cuMemPoolImportPointer(&q2, imported, &data), CUDA_SUCCESS);
  EXPECT_EQ(q2, q);
  EXPECT_EQ(cuda_double_imported_allocations(), 1);
  // Refused: data made before the export (as measured), a pool that is not
  // imported, another arena's data, data no driver made, null arguments.
  CUdeviceptr untouched = 0;
  EXPECT_EQ(cuMemPoolImportPointer(&untouched, imported, &before), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolImportPointer(&untouched, pool, &data), CUDA_ERROR_INVALID_VALUE);
  CUmemoryPool other = posix_pool();
  int const other_fd = export_fd(other);
  CUdeviceptr o = pool_alloc(other, 64);
  CUmemPoolPtrExportData other_data = export_pointer(o);
  EXPECT_EQ(cuMemPoolImportPointer(&untouched, imported, &other_data), CUDA_ERROR_INVALID_VALUE);
  CUmemPoolPtrExportData garbage{};
  std::memset(&garbage, 0x5a, sizeof garbage);
  EXPECT_EQ(cuMemPoolImportPointer(&untouched, imported, &garbage), CUDA_ERROR_INVALID_VALUE);
  CUmemPoolPtrExportData zero{};
  EXPECT_EQ(cuMemPoolImportPointer(&untouched, imported, &zero), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolImportPointer(&untouched, imported, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolImportPointer(nullptr, imported, &data), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(untouched, 0u);
  // Interior pointers have no export data (as measured); imported memory is not exported again.
  CUmemPoolPtrExportData out{};
  EXPECT_EQ(cuMemPoolExportPointer(&out, a + 256), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolExportPointer(&out, q), CUDA_ERROR_INVALID_VALUE);
  // Neither has pool memory a legacy IPC handle (as measured).
  CUipcMemHandle ipc{};
  EXPECT_EQ(cuIpcGetMemHandle(&ipc, a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuIpcGetMemHandle(&ipc, q), CUDA_ERROR_INVALID_VALUE);

  // One free ends it; the second fails (as measured).
  EXPECT_EQ(cuMemFree_v2(q), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(q), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuda_double_imported_allocations(), 0);
  EXPECT_EQ(read_device(a + 100, 10), std::vector<unsigned char>(10, 0xab));  // the exporter's block stays
  // The runtime's import, freed with cudaFree.
  void* r = nullptr;
  ASSERT_EQ(cudaMemPoolImportPointer(&r, reinterpret_cast<cudaMemPool_t>(imported),
                                     reinterpret_cast<cudaMemPoolPtrExportData*>(&data)),
            cudaSuccess);
  EXPECT_EQ(as_deviceptr(r), q);
  EXPECT_EQ(cudaMemPoolImportPointer(nullptr, reinterpret_cast<cudaMemPool_t>(imported),
                                     reinterpret_cast<cudaMemPoolPtrExportData*>(&zero)),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(r), cudaSuccess);
  EXPECT_EQ(cudaFree(r), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  // A block the exporter freed since can still be imported (as measured);
  // cuMemFreeAsync frees imported memory too.
  EXPECT_EQ(cuMemFreeAsync(a, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemPoolImportPointer(&q, imported, &data), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(q, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(q, nullptr), CUDA_ERROR_INVALID_VALUE);
  // Destroying the imported pool forgets what was imported through it.
  CUmemPoolPtrExportData early_data = export_pointer(early);
  ASSERT_EQ(cuMemPoolImportPointer(&q, imported, &early_data), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_imported_allocations(), 1);
  EXPECT_EQ(cuMemPoolDestroy(imported), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_imported_allocations(), 0);
  EXPECT_EQ(cuMemFree_v2(q), CUDA_ERROR_INVALID_VALUE);

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.pool_pointer_imports, 5u);
  // The copy past the end, 7 refused imports, 2 exports, 2 IPC handles, 3
  // second frees, the runtime's import without an output, the free after the
  // pool went.
  EXPECT_EQ(c.failed_calls, 1u + 7u + 2u + 2u + 3u + 1u + 1u);
  EXPECT_EQ(cuMemFreeAsync(early, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(o, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(close(other_fd), 0);
  EXPECT_EQ(cuMemPoolDestroy(other), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
}

// ------------------------------------------------------------ CudaDouble: legacy IPC open/close

TEST_F(CudaDouble, IpcOpenAndCloseMemHandles)
{
  CUdeviceptr native = 0;
  ASSERT_EQ(cuMemAlloc_v2(&native, 512), CUDA_SUCCESS);
  CUipcMemHandle own{};
  ASSERT_EQ(cuIpcGetMemHandle(&own, native), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  // Flags must be exactly CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (as measured).
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&p, own, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&p, own, 2), CUDA_ERROR_INVALID_VALUE);
  // A handle the driver did not make (as measured).
  CUipcMemHandle zero{}, random{};
  for (std::size_t i = 0; i < sizeof random.reserved; ++i) {
    random.reserved[i] = static_cast<char>(i * 37 + 11);
  }
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&p, zero, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&p, random, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_VALUE);
  // Its own handle, in the process that made it (as measured).
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&p, own, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuIpcOpenMemHandle_v1(&p, own, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuIpcOpenMemHandle_v2(nullptr, own, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(p, 0u);
  // Nothing was opened: nothing can be closed.
  for (CUdeviceptr never : {native, CUdeviceptr{0}, CUdeviceptr{4096}}) {
    EXPECT_EQ(cuIpcCloseMemHandle(never), CUDA_ERROR_INVALID_VALUE) << never;
  }
  std::thread([&] {  // both need a current context
    EXPECT_EQ(cuIpcOpenMemHandle_v2(&p, own, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuIpcCloseMemHandle(native), CUDA_ERROR_INVALID_CONTEXT);
  })
    .join();
  // The runtime's, through the driver.
  void* rt = nullptr;
  ASSERT_EQ(cudaMalloc(&rt, 64), cudaSuccess);
  cudaIpcMemHandle_t rt_handle{}, rt_zero{};
  ASSERT_EQ(cudaIpcGetMemHandle(&rt_handle, rt), cudaSuccess);
  void* opened = nullptr;
  EXPECT_EQ(cudaIpcOpenMemHandle(&opened, rt_handle, cudaIpcMemLazyEnablePeerAccess), cudaErrorDeviceUninitialized);
  EXPECT_EQ(cudaGetLastError(), cudaErrorDeviceUninitialized);
  EXPECT_EQ(cudaIpcOpenMemHandle(&opened, rt_zero, cudaIpcMemLazyEnablePeerAccess), cudaErrorInvalidValue);
  EXPECT_EQ(cudaIpcOpenMemHandle(&opened, rt_handle, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaIpcOpenMemHandle(nullptr, rt_handle, cudaIpcMemLazyEnablePeerAccess), cudaErrorInvalidValue);
  EXPECT_EQ(cudaIpcCloseMemHandle(rt), cudaErrorInvalidValue);
  EXPECT_EQ(opened, nullptr);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.ipc_mem_opens, 0u);
  EXPECT_EQ(c.ipc_mem_closes, 0u);
  EXPECT_EQ(c.ipc_mem_handles, 2u);
  EXPECT_EQ(c.failed_calls, 7u + 3u + 2u + 5u);
  EXPECT_EQ(cudaFree(rt), cudaSuccess);
  EXPECT_EQ(cuMemFree_v2(native), CUDA_SUCCESS);
}

// ------------------------------------------------------------ CudaDouble: address ranges

TEST_F(CudaDouble, GetAddressRangeOfEveryKind)
{
  void* rt = nullptr;
  ASSERT_EQ(cudaMalloc(&rt, 1000), cudaSuccess);
  CUdeviceptr drv = 0;
  ASSERT_EQ(cuMemAlloc_v2(&drv, 300), CUDA_SUCCESS);
  CUmemoryPool pool = posix_pool();
  CUdeviceptr pooled = pool_alloc(pool, 700);
  int const fd = export_fd(pool);
  CUmemoryPool imported = import_fd(fd);
  EXPECT_EQ(close(fd), 0);
  CUmemPoolPtrExportData data = export_pointer(pooled);
  CUdeviceptr in = 0;
  ASSERT_EQ(cuMemPoolImportPointer(&in, imported, &data), CUDA_SUCCESS);
  struct row {
    CUdeviceptr base;
    std::size_t size;
  };
  for (row const r : {row{as_deviceptr(rt), 1000}, row{drv, 300}, row{pooled, 700}, row{in, 700}}) {
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}, r.size - 1}) {
      CUdeviceptr base = 0;
      std::size_t size = 0;
      EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, r.base + offset), CUDA_SUCCESS);
      EXPECT_EQ(base, r.base);
      EXPECT_EQ(size, r.size);
    }
    CUdeviceptr base = 0;
    std::size_t size = 0;
    EXPECT_EQ(cuMemGetAddressRange_v2(&base, nullptr, r.base + 5), CUDA_SUCCESS);
    EXPECT_EQ(base, r.base);
    EXPECT_EQ(cuMemGetAddressRange_v2(nullptr, &size, r.base + 5), CUDA_SUCCESS);
    EXPECT_EQ(size, r.size);
    EXPECT_EQ(cuMemGetAddressRange_v2(nullptr, nullptr, r.base), CUDA_SUCCESS);
  }
  // Not device memory: NOT_FOUND (what cuda.h lists), the outputs untouched.
  int host = 0;
  CUdeviceptr base = 7;
  std::size_t size = 7;
  for (CUdeviceptr bad : {as_deviceptr(&host), CUdeviceptr{0}, drv + 300}) {
    EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, bad), CUDA_ERROR_NOT_FOUND) << bad;
  }
  EXPECT_EQ(cuMemFree_v2(drv), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, drv), CUDA_ERROR_NOT_FOUND);  // freed
  EXPECT_EQ(base, 7u);
  EXPECT_EQ(size, 7u);
  std::thread([&] { EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, pooled), CUDA_ERROR_INVALID_CONTEXT); }).join();
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 5u);
  EXPECT_EQ(cuMemFree_v2(in), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(imported), CUDA_SUCCESS);
  EXPECT_EQ(cudaFree(rt), cudaSuccess);
  EXPECT_EQ(cuMemFreeAsync(pooled, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
}

// ------------------------------------------------------------ CudaDouble: cuGetProcAddress of the new names

TEST_F(CudaDouble, GetProcAddressOfImportsIpcAndAddressRanges)
{
  void* const open_v1 = driver_symbol("cuIpcOpenMemHandle");
  void* const open_v2 = driver_symbol("cuIpcOpenMemHandle_v2");
  ASSERT_NE(open_v1, nullptr);
  ASSERT_NE(open_v2, nullptr);
  EXPECT_NE(open_v1, open_v2);
  EXPECT_EQ(open_v1, reinterpret_cast<void*>(&cuIpcOpenMemHandle_v1));
  EXPECT_EQ(proc("cuIpcOpenMemHandle"), open_v2);
  EXPECT_EQ(proc("cuIpcOpenMemHandle", 11000), open_v2);
  EXPECT_EQ(proc("cuIpcOpenMemHandle", 10020), open_v1);
  EXPECT_EQ(proc("cuIpcOpenMemHandle", 4010), open_v1);
  proc("cuIpcOpenMemHandle", 4000, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  struct since_row {
    char const* base;
    int version;
    char const* symbol;
  };
  since_row const since[] = {
    {"cuIpcCloseMemHandle", 4010, "cuIpcCloseMemHandle"},
    {"cuMemGetAddressRange", 3020, "cuMemGetAddressRange_v2"},
    {"cuMemPoolImportFromShareableHandle", 11020, "cuMemPoolImportFromShareableHandle"},
    {"cuMemPoolImportPointer", 11020, "cuMemPoolImportPointer"},
  };
  for (since_row const& row : since) {
    ASSERT_NE(driver_symbol(row.symbol), nullptr) << row.symbol;
    EXPECT_EQ(proc(row.base), driver_symbol(row.symbol)) << row.base;
    EXPECT_EQ(proc(row.base, row.version), driver_symbol(row.symbol)) << row.base;
    proc(row.base, row.version - 10, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
         CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  }
  // The suffixed names are no base names.
  proc("cuIpcOpenMemHandle_v2", 13000, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

// ------------------------------------------------------------ CudaDouble: two processes

// What the parent hands the child (fork + exec of this program, IpcChild.*).
constexpr int child_fd = 200;  // where the exported descriptor lands in the child
constexpr std::size_t shared_size = 64 * 1024;
constexpr unsigned parent_seed = 11;
constexpr unsigned child_seed = 99;

TEST_F(CudaDouble, TwoProcessesSharePoolMemory)
{
  cudaMemPool_t pool = nullptr;
  auto const props = device_pool_props(0, cudaMemHandleTypePosixFileDescriptor);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  void* early = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&early, 256, pool, cudaStreamLegacy), cudaSuccess);
  cudaMemPoolPtrExportData early_data{};
  ASSERT_EQ(cudaMemPoolExportPointer(&early_data, early), cudaSuccess);  // before the export
  int fd = -1;
  ASSERT_EQ(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, shared_size, pool, cudaStreamLegacy), cudaSuccess);
  auto const mine = pattern(shared_size, parent_seed);
  ASSERT_EQ(cudaMemcpy(p, mine.data(), mine.size(), cudaMemcpyHostToDevice), cudaSuccess);
  cudaMemPoolPtrExportData data{};
  ASSERT_EQ(cudaMemPoolExportPointer(&data, p), cudaSuccess);
  void* native = nullptr;
  ASSERT_EQ(cudaMalloc(&native, 256), cudaSuccess);
  cudaIpcMemHandle_t ipc{};
  ASSERT_EQ(cudaIpcGetMemHandle(&ipc, native), cudaSuccess);

  // Everything the child needs is built before fork(): between fork and exec
  // only async-signal-safe calls are made.
  std::string const data_var = "CUDA_DOUBLE_IPC_CHILD_DATA=" + to_hex(&data, sizeof data);
  std::string const early_var = "CUDA_DOUBLE_IPC_CHILD_EARLY=" + to_hex(&early_data, sizeof early_data);
  std::string const ipc_var = "CUDA_DOUBLE_IPC_CHILD_IPC=" + to_hex(&ipc, sizeof ipc);
  std::string const fd_var = "CUDA_DOUBLE_IPC_CHILD_FD=" + std::to_string(child_fd);
  std::string const filter = "--gtest_filter=IpcChild.*";
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    env.push_back(*e);
  }
  for (std::string const* var : {&data_var, &early_var, &ipc_var, &fd_var}) {
    env.push_back(const_cast<char*>(var->c_str()));
  }
  env.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, const_cast<char*>(filter.c_str()), nullptr};
  pid_t const child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // dup2 clears close-on-exec on the copy, so the child inherits it.
    if (dup2(fd, child_fd) < 0) { _exit(126); }
    execve(exe, argv, env.data());
    _exit(127);
  }
  EXPECT_EQ(close(fd), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (see its output above)";
  // The child wrote its bytes into the block.
  std::vector<unsigned char> seen(shared_size);
  ASSERT_EQ(cudaMemcpy(seen.data(), p, seen.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(seen, pattern(shared_size, child_seed));
  // Nothing of the child's imports shows in this process.
  EXPECT_EQ(cuda_double_imported_allocations(), 0);
  EXPECT_EQ(cuda_double_get_counters().pool_handle_imports, 0u);
  EXPECT_EQ(cudaFree(native), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(p, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(early, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

// ------------------------------------------------------------ IpcChild (only in the child above)

TEST(IpcChild, ImportsTheParentsPoolAndPointer)
{
  char const* fd_text = std::getenv("CUDA_DOUBLE_IPC_CHILD_FD");
  cudaMemPoolPtrExportData data{}, early{};
  CUipcMemHandle ipc{};
  bool const child = fd_text != nullptr && from_hex(std::getenv("CUDA_DOUBLE_IPC_CHILD_DATA"), &data, sizeof data) &&
                     from_hex(std::getenv("CUDA_DOUBLE_IPC_CHILD_EARLY"), &early, sizeof early) &&
                     from_hex(std::getenv("CUDA_DOUBLE_IPC_CHILD_IPC"), &ipc, sizeof ipc);
  REQUIRE_CONFIG(child, "runs only as the child of CudaDouble.TwoProcessesSharePoolMemory");
  int const fd = std::atoi(fd_text);
  ASSERT_EQ(fd, child_fd);
  std::size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  cudaMemPool_t pool = nullptr, again = nullptr;
  ASSERT_EQ(cudaMemPoolImportFromShareableHandle(&pool, fd_handle(fd), cudaMemHandleTypePosixFileDescriptor, 0),
            cudaSuccess);
  ASSERT_EQ(cudaMemPoolImportFromShareableHandle(&again, fd_handle(fd), cudaMemHandleTypePosixFileDescriptor, 0),
            cudaSuccess);
  EXPECT_EQ(again, pool);   // as measured
  ASSERT_EQ(close(fd), 0);  // nothing depends on it from now on (as measured)
  std::uint64_t value = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &value), cudaErrorInvalidValue);
  void* p = nullptr;
  EXPECT_EQ(cudaMemPoolImportPointer(&p, pool, &early), cudaErrorInvalidValue);  // made before the export
  ASSERT_EQ(cudaMemPoolImportPointer(&p, pool, &data), cudaSuccess);
  ASSERT_NE(p, nullptr);
  std::size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_after, free_before);  // imported memory counts for nothing here
  EXPECT_EQ(cuda_double_pointer_kind(p), 4);
  // The parent's bytes, read here; then this process's, for the parent to read.
  std::vector<unsigned char> seen(shared_size);
  ASSERT_EQ(cudaMemcpy(seen.data(), p, seen.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(seen, pattern(shared_size, parent_seed));
  auto const mine = pattern(shared_size, child_seed);
  ASSERT_EQ(cudaMemcpy(p, mine.data(), mine.size(), cudaMemcpyHostToDevice), cudaSuccess);
  // The parent's legacy IPC handle: not its own process's (so not
  // INVALID_CONTEXT), but the double cannot map cudaMalloc memory of another
  // process (see cuda_double.hpp).
  CUdeviceptr opened = 0;
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&opened, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(opened, 0u);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // one free ends it (as measured)
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.pool_handle_imports, 2u);
  EXPECT_EQ(c.pool_pointer_imports, 1u);
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

}  // namespace
