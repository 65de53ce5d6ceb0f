#include "state/peer_access.hpp"

#include "cuda/driver.hpp"

namespace asyncshim::shim {
namespace {

bool valid(int device) noexcept { return device >= 0 && device < peer_access_map::max_devices; }

std::uint64_t bit(int device) noexcept { return std::uint64_t{1} << static_cast<unsigned>(device); }

peer_access_map the_map;  // constexpr-constructible: no load-time code

}  // namespace

void peer_access_map::grant(int accessor, int owner) noexcept
{
  if (valid(accessor) && valid(owner)) { accessors_[static_cast<std::size_t>(owner)].fetch_or(bit(accessor)); }
}

void peer_access_map::revoke(int accessor, int owner) noexcept
{
  if (valid(accessor) && valid(owner)) { accessors_[static_cast<std::size_t>(owner)].fetch_and(~bit(accessor)); }
}

void peer_access_map::forget(int device) noexcept
{
  if (!valid(device)) { return; }
  accessors_[static_cast<std::size_t>(device)].store(0);
  for (auto& accessors : accessors_) {
    accessors.fetch_and(~bit(device));
  }
}

std::uint64_t peer_access_map::accessors_of(int owner) const noexcept
{
  return valid(owner) ? accessors_[static_cast<std::size_t>(owner)].load() : 0;
}

peer_access_map& peer_access() noexcept { return the_map; }

CUresult set_pool_access(CUmemoryPool pool, int accessor, bool allowed) noexcept
{
  auto const set_access = driver().mem_pool_set_access;
  if (set_access == nullptr) { return CUDA_ERROR_NOT_SUPPORTED; }
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = accessor;
  desc.flags = allowed ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return set_access(pool, &desc, 1);
}

}  // namespace asyncshim::shim
