// errors.cpp: cudaGetErrorName and cudaGetErrorString of the CUDA runtime TEST
// DOUBLE (see cuda_double.hpp). Names are the cudaError enumerators of CUDA 13.0.
#include <cuda_runtime_api.h>

#include "cuda_double.hpp"

// Every cudaError enumerator of driver_types.h (CUDA 13.0), in order.
#define CUDA_DOUBLE_ERRORS(X)                \
  X(cudaSuccess)                             \
  X(cudaErrorInvalidValue)                   \
  X(cudaErrorMemoryAllocation)               \
  X(cudaErrorInitializationError)            \
  X(cudaErrorCudartUnloading)                \
  X(cudaErrorProfilerDisabled)               \
  X(cudaErrorProfilerNotInitialized)         \
  X(cudaErrorProfilerAlreadyStarted)         \
  X(cudaErrorProfilerAlreadyStopped)         \
  X(cudaErrorInvalidConfiguration)           \
  X(cudaErrorInvalidPitchValue)              \
  X(cudaErrorInvalidSymbol)                  \
  X(cudaErrorInvalidHostPointer)             \
  X(cudaErrorInvalidDevicePointer)           \
  X(cudaErrorInvalidTexture)                 \
  X(cudaErrorInvalidTextureBinding)          \
  X(cudaErrorInvalidChannelDescriptor)       \
  X(cudaErrorInvalidMemcpyDirection)         \
  X(cudaErrorAddressOfConstant)              \
  X(cudaErrorTextureFetchFailed)             \
  X(cudaErrorTextureNotBound)                \
  X(cudaErrorSynchronizationError)           \
  X(cudaErrorInvalidFilterSetting)           \
  X(cudaErrorInvalidNormSetting)             \
  X(cudaErrorMixedDeviceExecution)           \
  X(cudaErrorNotYetImplemented)              \
  X(cudaErrorMemoryValueTooLarge)            \
  X(cudaErrorStubLibrary)                    \
  X(cudaErrorInsufficientDriver)             \
  X(cudaErrorCallRequiresNewerDriver)        \
  X(cudaErrorInvalidSurface)                 \
  X(cudaErrorDuplicateVariableName)          \
  X(cudaErrorDuplicateTextureName)           \
  X(cudaErrorDuplicateSurfaceName)           \
  X(cudaErrorDevicesUnavailable)             \
  X(cudaErrorIncompatibleDriverContext)      \
  X(cudaErrorMissingConfiguration)           \
  X(cudaErrorPriorLaunchFailure)             \
  X(cudaErrorLaunchMaxDepthExceeded)         \
  X(cudaErrorLaunchFileScopedTex)            \
  X(cudaErrorLaunchFileScopedSurf)           \
  X(cudaErrorSyncDepthExceeded)              \
  X(cudaErrorLaunchPendingCountExceeded)     \
  X(cudaErrorInvalidDeviceFunction)          \
  X(cudaErrorNoDevice)                       \
  X(cudaErrorInvalidDevice)                  \
  X(cudaErrorDeviceNotLicensed)              \
  X(cudaErrorSoftwareValidityNotEstablished) \
  X(cudaErrorStartupFailure)                 \
  X(cudaErrorInvalidKernelImage)             \
  X(cudaErrorDeviceUninitialized)            \
  X(cudaErrorMapBufferObjectFailed)          \
  X(cudaErrorUnmapBufferObjectFailed)        \
  X(cudaErrorArrayIsMapped)                  \
  X(cudaErrorAlreadyMapped)                  \
  X(cudaErrorNoKernelImageForDevice)         \
  X(cudaErrorAlreadyAcquired)                \
  X(cudaErrorNotMapped)                      \
  X(cudaErrorNotMappedAsArray)               \
  X(cudaErrorNotMappedAsPointer)             \
  X(cudaErrorECCUncorrectable)               \
  X(cudaErrorUnsupportedLimit)               \
  X(cudaErrorDeviceAlreadyInUse)             \
  X(cudaErrorPeerAccessUnsupported)          \
  X(cudaErrorInvalidPtx)                     \
  X(cudaErrorInvalidGraphicsContext)         \
  X(cudaErrorNvlinkUncorrectable)            \
  X(cudaErrorJitCompilerNotFound)            \
  X(cudaErrorUnsupportedPtxVersion)          \
  X(cudaErrorJitCompilationDisabled)         \
  X(cudaErrorUnsupportedExecAffinity)        \
  X(cudaErrorUnsupportedDevSideSync)         \
  X(cudaErrorContained)                      \
  X(cudaErrorInvalidSource)                  \
  X(cudaErrorFileNotFound)                   \
  X(cudaErrorSharedObjectSymbolNotFound)     \
  X(cudaErrorSharedObjectInitFailed)         \
  X(cudaErrorOperatingSystem)                \
  X(cudaErrorInvalidResourceHandle)          \
  X(cudaErrorIllegalState)                   \
  X(cudaErrorLossyQuery)                     \
  X(cudaErrorSymbolNotFound)                 \
  X(cudaErrorNotReady)                       \
  X(cudaErrorIllegalAddress)                 \
  X(cudaErrorLaunchOutOfResources)           \
  X(cudaErrorLaunchTimeout)                  \
  X(cudaErrorLaunchIncompatibleTexturing)    \
  X(cudaErrorPeerAccessAlreadyEnabled)       \
  X(cudaErrorPeerAccessNotEnabled)           \
  X(cudaErrorSetOnActiveProcess)             \
  X(cudaErrorContextIsDestroyed)             \
  X(cudaErrorAssert)                         \
  X(cudaErrorTooManyPeers)                   \
  X(cudaErrorHostMemoryAlreadyRegistered)    \
  X(cudaErrorHostMemoryNotRegistered)        \
  X(cudaErrorHardwareStackError)             \
  X(cudaErrorIllegalInstruction)             \
  X(cudaErrorMisalignedAddress)              \
  X(cudaErrorInvalidAddressSpace)            \
  X(cudaErrorInvalidPc)                      \
  X(cudaErrorLaunchFailure)                  \
  X(cudaErrorCooperativeLaunchTooLarge)      \
  X(cudaErrorTensorMemoryLeak)               \
  X(cudaErrorNotPermitted)                   \
  X(cudaErrorNotSupported)                   \
  X(cudaErrorSystemNotReady)                 \
  X(cudaErrorSystemDriverMismatch)           \
  X(cudaErrorCompatNotSupportedOnDevice)     \
  X(cudaErrorMpsConnectionFailed)            \
  X(cudaErrorMpsRpcFailure)                  \
  X(cudaErrorMpsServerNotReady)              \
  X(cudaErrorMpsMaxClientsReached)           \
  X(cudaErrorMpsMaxConnectionsReached)       \
  X(cudaErrorMpsClientTerminated)            \
  X(cudaErrorCdpNotSupported)                \
  X(cudaErrorCdpVersionMismatch)             \
  X(cudaErrorStreamCaptureUnsupported)       \
  X(cudaErrorStreamCaptureInvalidated)       \
  X(cudaErrorStreamCaptureMerge)             \
  X(cudaErrorStreamCaptureUnmatched)         \
  X(cudaErrorStreamCaptureUnjoined)          \
  X(cudaErrorStreamCaptureIsolation)         \
  X(cudaErrorStreamCaptureImplicit)          \
  X(cudaErrorCapturedEvent)                  \
  X(cudaErrorStreamCaptureWrongThread)       \
  X(cudaErrorTimeout)                        \
  X(cudaErrorGraphExecUpdateFailure)         \
  X(cudaErrorExternalDevice)                 \
  X(cudaErrorInvalidClusterSize)             \
  X(cudaErrorFunctionNotLoaded)              \
  X(cudaErrorInvalidResourceType)            \
  X(cudaErrorInvalidResourceConfiguration)   \
  X(cudaErrorUnknown)

namespace {

char const* description(cudaError_t error)
{
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorUnknown: return "unknown error";
    default: return nullptr;
  }
}

char const* name(cudaError_t error)
{
  switch (error) {
#define CUDA_DOUBLE_NAME_CASE(e) \
  case e: return #e;
    CUDA_DOUBLE_ERRORS(CUDA_DOUBLE_NAME_CASE)
#undef CUDA_DOUBLE_NAME_CASE
    default: return nullptr;
  }
}

char const* const unrecognized = "unrecognized error code";

}  // namespace

extern "C" {

CUDA_DOUBLE_API const char* CUDARTAPI cudaGetErrorName(cudaError_t error)
{
  char const* n = name(error);
  return n != nullptr ? n : unrecognized;
}

CUDA_DOUBLE_API const char* CUDARTAPI cudaGetErrorString(cudaError_t error)
{
  if (char const* d = description(error)) { return d; }
  // Known code without a description of its own: its name says what it is.
  char const* n = name(error);
  return n != nullptr ? n : unrecognized;
}

}  // extern "C"
