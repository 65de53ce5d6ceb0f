#!/usr/bin/env bash
# Checks what the two CUDA test doubles show to the programs they are loaded into:
#  - the driver double is libcuda.so.1 (file and SONAME) and exports exactly
#    the CUDA driver functions listed in cuda_double.hpp, the cuda_double_*
#    introspection functions and, for the runtime double only, C++ functions in
#    namespace cuda_double (no other C++ symbols);
#  - the runtime double exports exactly the CUDA runtime functions listed in
#    cuda_double.hpp, needs libcuda.so.1 and finds it through an RPATH (searched
#    before LD_LIBRARY_PATH), not a RUNPATH;
#  - neither needs a real CUDA library.
# usage: check_doubles.sh path/to/driver/libcuda.so.1 path/to/libcudart_double.so
set -euo pipefail
export LC_ALL=C  # one sort order everywhere
driver=$1
runtime=$2
failed=0
fail() { echo "FAIL: $*"; failed=1; }
dynamic() { readelf -d "$1" | awk -v tag="($2)" '$2 == tag {print $NF}' | tr -d '[]' | tr '\n' ' '; }
exports() { nm -D --defined-only "$1" | awk '{print $NF}' | sort; }

[[ "$(basename "$driver")" == libcuda.so.1 ]] || fail "driver double file is $(basename "$driver"), not libcuda.so.1"
[[ "$(dynamic "$driver" SONAME)" == "libcuda.so.1 " ]] || fail "driver SONAME is '$(dynamic "$driver" SONAME)'"
for lib in "$driver" "$runtime"; do
  needed=$(dynamic "$lib" NEEDED)
  echo "$(basename "$lib") NEEDED: $needed"
  [[ "$needed" != *libcudart* ]] || fail "$(basename "$lib") needs a CUDA runtime"
done
[[ "$(dynamic "$driver" NEEDED)" != *libcuda* ]] || fail "the driver double needs a libcuda"
[[ "$(dynamic "$runtime" NEEDED)" == *"libcuda.so.1 "* ]] || fail "the runtime double does not need libcuda.so.1"
rpath=$(dynamic "$runtime" RPATH)
[[ "$rpath" == *"$(dirname "$driver")"* ]] || fail "the runtime double's RPATH '$rpath' lacks $(dirname "$driver")"
[[ -z "$(dynamic "$runtime" RUNPATH)" ]] || fail "the runtime double has a RUNPATH (LD_LIBRARY_PATH would win over it)"

expected_driver="cuCtxCreate_v4 cuCtxDestroy_v2 cuPointerSetAttribute cuCtxGetCurrent cuCtxGetDevice cuCtxPopCurrent_v2 cuCtxPushCurrent_v2 cuCtxSetCurrent
cuCtxSynchronize cuCtxSynchronize_v2 cuDeviceGet cuDeviceGetAttribute cuDeviceGetCount cuDeviceGetName cuDeviceGetPCIBusId cuDevicePrimaryCtxRelease_v2
cuDevicePrimaryCtxGetState cuDevicePrimaryCtxReset_v2 cuDevicePrimaryCtxRetain cuDriverGetVersion cuEventCreate cuEventDestroy_v2 cuEventQuery
cuEventRecord cuEventRecord_ptsz cuEventSynchronize cuGetErrorName cuGetErrorString cuGetProcAddress
cuGetProcAddress_v2 cuGraphDestroy cuGraphGetNodes
cuInit cuMemAllocAsync cuMemAllocAsync_ptsz cuMemAllocFromPoolAsync cuMemAllocFromPoolAsync_ptsz cuMemAlloc_v2 cuMemAllocPitch_v2
cuMemAllocHost_v2 cuMemHostAlloc cuMemFreeHost cuMemHostGetDevicePointer_v2 cuMemHostGetFlags
cuMemFreeAsync cuMemFreeAsync_ptsz cuMemFree_v2 cuMemGetInfo_v2 cuMemPoolCreate cuMemPoolDestroy
cuMemPoolGetAttribute cuMemPoolSetAttribute cuMemPoolTrimTo cuMemcpyDtoH_v2 cuMemcpyHtoD_v2 cuMemsetD8_v2 cuPointerGetAttribute
cuStreamBeginCapture_v2 cuStreamBeginCapture_v2_ptsz cuStreamCreate cuStreamCreateWithPriority cuStreamDestroy
cuStreamDestroy_v2 cuStreamEndCapture cuStreamEndCapture_ptsz cuStreamGetFlags cuStreamGetFlags_ptsz
cuStreamIsCapturing cuStreamIsCapturing_ptsz cuStreamQuery cuStreamQuery_ptsz cuStreamSynchronize
cuLaunchKernel cuLaunchKernel_ptsz cuLaunchHostFunc cuLaunchHostFunc_ptsz cuMemcpyAsync cuMemcpyAsync_ptsz cuMemsetD8Async cuMemsetD8Async_ptsz cuGraphInstantiateWithFlags cuGraphLaunch cuGraphLaunch_ptsz cuGraphExecDestroy cuDoubleFutureFunction cuda_double_create_stream_unfollowed
cuStreamSynchronize_ptsz cuStreamWaitEvent cuStreamWaitEvent_ptsz cuThreadExchangeStreamCaptureMode
cuda_double_get_counters cuda_double_last_alloc_stream cuda_double_last_free_stream cuda_double_last_wait_stream
cuda_double_live_allocations cuda_double_pointer_kind cuda_double_pointer_pool cuda_double_proc_lookups
cuda_double_reset_counters cuda_double_set_stream_busy cuda_double_stream_is_capturing
cuda_double_sim_freed cuda_double_sim_get_summary cuda_double_sim_handout cuda_double_touch_kernel
cuda_double_stream_ops
cuda_double_last_record_stream cuda_double_last_serial
cuDeviceCanAccessPeer cuCtxEnablePeerAccess cuCtxDisablePeerAccess cuMemPoolSetAccess cuMemPoolGetAccess
cuMemPoolExportToShareableHandle cuMemPoolExportPointer cuIpcGetMemHandle cuda_double_pool_access
cuda_double_can_access cuMemPoolImportFromShareableHandle cuMemPoolImportPointer cuIpcOpenMemHandle
cuIpcOpenMemHandle_v2 cuIpcCloseMemHandle cuMemGetAddressRange_v2 cuda_double_imported_allocations cuda_double_device_processes"
expected_runtime="cudaDeviceGetAttribute cudaDeviceGetDefaultMemPool cudaDeviceReset cudaDeviceSynchronize
cudaDriverGetVersion cudaEventCreate cudaEventCreateWithFlags cudaEventDestroy cudaEventQuery cudaEventRecord
cudaEventSynchronize cudaFree cudaFreeAsync cudaGetDevice cudaGetDeviceCount cudaGetErrorName cudaGetErrorString
cudaGetLastError cudaGraphDestroy cudaGraphGetNodes cudaLaunchHostFunc cudaGraphInstantiate cudaGraphLaunch
cudaGraphExecDestroy
cudaMalloc cudaMallocAsync cudaMallocFromPoolAsync cudaMallocPitch cudaMalloc3D cudaMemGetInfo
cudaMallocHost cudaHostAlloc cudaFreeHost cudaHostGetDevicePointer cudaHostGetFlags cudaMemPoolCreate cudaMemPoolDestroy
cudaMemPoolGetAttribute cudaMemPoolSetAttribute cudaMemPoolTrimTo cudaMemcpy cudaMemcpyAsync cudaMemset cudaMemsetAsync cudaPeekAtLastError cudaRuntimeGetVersion
cudaSetDevice cudaStreamBeginCapture cudaStreamCreate cudaStreamCreateWithFlags cudaStreamCreateWithPriority
cudaStreamDestroy cudaStreamEndCapture cudaStreamGetFlags cudaStreamIsCapturing cudaStreamQuery
cudaStreamSynchronize cudaStreamWaitEvent cudaThreadExchangeStreamCaptureMode
cudaDeviceCanAccessPeer cudaDeviceEnablePeerAccess cudaDeviceDisablePeerAccess cudaMemPoolSetAccess
cudaMemPoolGetAccess cudaMemPoolExportToShareableHandle cudaMemPoolExportPointer cudaIpcGetMemHandle
cudaMemPoolImportFromShareableHandle cudaMemPoolImportPointer cudaIpcOpenMemHandle cudaIpcCloseMemHandle
cudaPointerGetAttributes"
normalize() { tr ' \n' '\n\n' | sed '/^$/d' | sort | tr '\n' ' '; }

driver_c=$(exports "$driver" | grep -v '^_Z' | normalize)
[[ "$driver_c" == "$(echo "$expected_driver" | normalize)" ]] || fail "driver double exports '$driver_c'"
driver_cxx=$(exports "$driver" | grep '^_Z' | c++filt | grep -v '^cuda_double::' || true)
[[ -z "$driver_cxx" ]] || fail "C++ symbols outside namespace cuda_double in the driver double:"$'\n'"$driver_cxx"
runtime_all=$(exports "$runtime" | normalize)
[[ "$runtime_all" == "$(echo "$expected_runtime" | normalize)" ]] || fail "runtime double exports '$runtime_all'"

if [[ $failed -ne 0 ]]; then exit 1; fi
echo "CUDA doubles: OK"
