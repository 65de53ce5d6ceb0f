// The peer-access map on its own (state/peer_access.hpp): what the program
// granted, revoked and what a device reset forgets. It needs no CUDA.
#include "state/peer_access.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace {

using asyncshim::shim::peer_access_map;

constexpr std::uint64_t bit(int device) { return std::uint64_t{1} << device; }

TEST(PeerAccessMap, GrantsAreKeptPerOwner)
{
  peer_access_map map;
  map.grant(1, 0);
  map.grant(2, 0);
  map.grant(0, 3);
  EXPECT_EQ(map.accessors_of(0), bit(1) | bit(2));
  EXPECT_EQ(map.accessors_of(3), bit(0));
  EXPECT_EQ(map.accessors_of(1), 0U);
}

TEST(PeerAccessMap, RevokeTakesOneGrantAway)
{
  peer_access_map map;
  map.grant(1, 0);
  map.grant(2, 0);
  map.revoke(1, 0);
  EXPECT_EQ(map.accessors_of(0), bit(2));
  map.revoke(1, 0);  // twice: nothing more happens
  EXPECT_EQ(map.accessors_of(0), bit(2));
}

TEST(PeerAccessMap, AResetForgetsAccessFromAndToTheDevice)
{
  peer_access_map map;
  map.grant(1, 0);  // 1 reads 0's memory
  map.grant(0, 2);  // 0 reads 2's memory
  map.grant(3, 2);
  map.forget(0);
  EXPECT_EQ(map.accessors_of(0), 0U);
  EXPECT_EQ(map.accessors_of(2), bit(3));
}

TEST(PeerAccessMap, DevicesOutsideTheLimitAreIgnored)
{
  peer_access_map map;
  map.grant(peer_access_map::max_devices, 0);
  map.grant(0, peer_access_map::max_devices);
  map.grant(-1, 0);
  EXPECT_EQ(map.accessors_of(0), 0U);
  EXPECT_EQ(map.accessors_of(peer_access_map::max_devices), 0U);
  EXPECT_EQ(map.accessors_of(-1), 0U);
}

}  // namespace
