// The CUDA-free parts of legacy IPC on pool memory: the shim's handle format,
// the channel (abstract Unix socket, descriptor passing, credentials), and
// the tables of exported and imported blocks.
#include "state/ipc_exports.hpp"
#include "state/ipc_imports.hpp"
#include "support/ipc_handle.hpp"
#include "support/unix_channel.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace {

using namespace asyncshim::shim;

ipc_handle sample()
{
  ipc_handle h;
  h.exporter = 0x0123456789abcdefULL;
  h.block = 42;
  h.size = 3ULL << 30;
  h.uid = 1000;
  h.pid = 4321;
  h.device = 3;
  return h;
}

TEST(IpcHandle, RoundTrips)
{
  ipc_handle_bytes const bytes = encode(sample());
  auto const decoded = decode_ipc_handle(bytes.data());
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(*decoded, sample());
  EXPECT_EQ(std::memcmp(bytes.data(), "ASHMIPC\x01", 8), 0);
}

TEST(IpcHandle, CrcIsZlibs)
{
  auto const* text = reinterpret_cast<unsigned char const*>("123456789");
  EXPECT_EQ(crc32(text, 9), 0xCBF43926U);
}

TEST(IpcHandle, EveryChangedByteIsRejected)
{
  ipc_handle_bytes const good = encode(sample());
  for (std::size_t i = 0; i < good.size(); ++i) {
    ipc_handle_bytes bad = good;
    bad[i] ^= 0x01;
    EXPECT_FALSE(decode_ipc_handle(bad.data()).has_value()) << "byte " << i;
  }
}

TEST(IpcHandle, DriverHandlesAreNotTheShims)
{
  // Legacy handles an H200 (driver 580) gave for cudaMalloc memory: they
  // begin with a user-space address.
  char const* seen[] = {
    "d03806c4a15500000c02000000000000000010000000000000020000000000000600000000ff000032000000000000001e00d0c19600005c00"
    "00000000000000",
    "d0a8227485550000ee01000000000000000000040000000000400000000000000600000000ff000033000000000000001c00d0c19800005c00"
    "00000000000000",
  };
  for (char const* text : seen) {
    unsigned char bytes[64];
    for (int i = 0; i < 64; ++i) {
      unsigned value = 0;
      ASSERT_EQ(std::sscanf(text + 2 * i, "%2x", &value), 1);
      bytes[i] = static_cast<unsigned char>(value);
    }
    EXPECT_FALSE(decode_ipc_handle(bytes).has_value());
  }
  unsigned char zeros[64] = {};
  EXPECT_FALSE(decode_ipc_handle(zeros).has_value());
  EXPECT_FALSE(decode_ipc_handle(nullptr).has_value());
}

TEST(IpcHandle, ZeroIdsAreRejected)
{
  ipc_handle h = sample();
  h.block = 0;
  EXPECT_FALSE(decode_ipc_handle(encode(h).data()).has_value());
  h = sample();
  h.exporter = 0;
  EXPECT_FALSE(decode_ipc_handle(encode(h).data()).has_value());
}

TEST(UnixChannel, NameIsAbstractAndNamedById) { EXPECT_EQ(channel_name(0xabcULL), "asyncshim-ipc-0000000000000abc"); }

TEST(UnixChannel, CarriesAMessageAndADescriptor)
{
  listening_channel const server = open_channel();
  ASSERT_GE(server.fd, 0) << std::strerror(server.error);
  EXPECT_NE(server.id, 0U);
  EXPECT_NE(fcntl(server.fd, F_GETFD) & FD_CLOEXEC, 0);
  int const client = connect_channel(server.id, 2000);
  ASSERT_GE(client, 0) << std::strerror(errno);
  int const accepted = accept_connection(server.fd, 2000);
  ASSERT_GE(accepted, 0);
  uid_t uid = 12345;
  ASSERT_TRUE(peer_user(accepted, uid));
  EXPECT_EQ(uid, geteuid());
  ASSERT_TRUE(peer_user(client, uid));
  EXPECT_EQ(uid, geteuid());

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::uint64_t const sent = 77;
  ASSERT_TRUE(send_message(accepted, &sent, sizeof sent, fds[1]));
  std::uint64_t got = 0;
  int received = -1;
  ASSERT_TRUE(receive_message(client, &got, sizeof got, received));
  EXPECT_EQ(got, 77U);
  ASSERT_GE(received, 0);
  EXPECT_NE(fcntl(received, F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_EQ(write(received, "y", 1), 1);  // the same pipe
  char c = 0;
  ASSERT_EQ(read(fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
  // A message of another size is refused.
  ASSERT_TRUE(send_message(accepted, &sent, 4));
  EXPECT_FALSE(receive_message(client, &got, sizeof got, received));
  EXPECT_EQ(received, -1);
  for (int fd : {fds[0], fds[1], received, client, accepted, server.fd}) {
    close(fd);
  }
}

TEST(UnixChannel, NobodyListeningIsRefusedAtOnce)
{
  listening_channel const server = open_channel();
  ASSERT_GE(server.fd, 0);
  close(server.fd);
  EXPECT_LT(connect_channel(server.id, 2000), 0);
  EXPECT_TRUE(errno == ECONNREFUSED || errno == ENOENT) << std::strerror(errno);
}

TEST(UnixChannel, TimesOutOnASilentPeer)
{
  listening_channel const server = open_channel();
  ASSERT_GE(server.fd, 0);
  int const client = connect_channel(server.id, 200);
  ASSERT_GE(client, 0);
  std::uint64_t got = 0;
  int received = -1;
  EXPECT_FALSE(receive_message(client, &got, sizeof got, received));  // nobody accepts: the timeout ends it
  close(client);
  close(server.fd);
}

TEST(UnixChannel, TellsAnotherUser)
{
  if (geteuid() != 0) { GTEST_SKIP() << "not root: cannot start a process of another user"; }
  passwd const* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  listening_channel const server = open_channel();
  ASSERT_GE(server.fd, 0);
  pid_t const pid = fork();
  if (pid == 0) {
    if (setgid(nobody->pw_gid) != 0 || setuid(nobody->pw_uid) != 0) { _exit(3); }
    int const fd = connect_channel(server.id, 2000);
    char c = 0;
    _exit(fd >= 0 && read(fd, &c, 1) >= 0 ? 0 : 4);
  }
  int const accepted = accept_connection(server.fd, 2000);
  ASSERT_GE(accepted, 0);
  uid_t uid = 0;
  ASSERT_TRUE(peer_user(accepted, uid));
  EXPECT_EQ(uid, nobody->pw_uid);
  close(accepted);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(server.fd);
}

exported_block block_at(std::uintptr_t address, int device = 0)
{
  exported_block b;
  b.address = address;
  b.size = 4096;
  b.device = device;
  b.data[0] = 0xAB;
  return b;
}

TEST(IpcExports, OneHandlePerBlockAndSerialsNeverReused)
{
  ipc_exports exports;
  ipc_handle identity = sample();
  EXPECT_FALSE(exports.handle_of(0x1000).has_value());
  ipc_handle_bytes const first = exports.add(block_at(0x1000), identity);
  EXPECT_EQ(exports.add(block_at(0x1000), identity), first);
  EXPECT_EQ(exports.handle_of(0x1000), first);
  auto const decoded = decode_ipc_handle(first.data());
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->size, 4096U);
  EXPECT_EQ(decoded->exporter, identity.exporter);
  auto const found = exports.find(decoded->block);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->data[0], 0xAB);
  EXPECT_TRUE(exports.forget(0x1000));                     // it had been exported
  EXPECT_FALSE(exports.forget(0x1000));                    // not any more
  EXPECT_FALSE(exports.find(decoded->block).has_value());  // a handle of freed memory names nothing
  ipc_handle_bytes const second = exports.add(block_at(0x1000), identity);
  EXPECT_NE(decode_ipc_handle(second.data())->block, decoded->block);
  EXPECT_EQ(exports.size(), 1U);
  EXPECT_EQ(exports.ever_exported(), 2U);
}

TEST(IpcExports, ResetForgetsTheDevicesBlocksAndPool)
{
  ipc_exports exports;
  (void)exports.add(block_at(0x1000, 0), sample());
  (void)exports.add(block_at(0x2000, 1), sample());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pool_share const kept = exports.keep_pool_share(1, fds[0]);
  EXPECT_EQ(kept.fd, fds[0]);
  int other[2];
  ASSERT_EQ(pipe(other), 0);
  EXPECT_EQ(exports.keep_pool_share(1, other[0]).fd, fds[0]);  // the first stays; the second is closed
  EXPECT_EQ(fcntl(other[0], F_GETFD), -1);
  exports.forget_device(1);
  EXPECT_EQ(exports.size(), 1U);
  EXPECT_FALSE(exports.handle_of(0x2000).has_value());
  EXPECT_TRUE(exports.handle_of(0x1000).has_value());
  EXPECT_FALSE(exports.pool_share_of(1).has_value());
  EXPECT_EQ(fcntl(fds[0], F_GETFD), -1);  // closed with the old pool
  close(fds[1]);
  close(other[1]);
}

TEST(IpcImports, CountsOpensUntilTheLastClose)
{
  ipc_imports imports;
  EXPECT_FALSE(imports.reopen(1, 2).has_value());
  EXPECT_EQ(imports.close(0x5000), import_close::not_imported);
  imports.add(1, 2, 0x5000);
  EXPECT_TRUE(imports.contains(0x5000));
  EXPECT_EQ(imports.reopen(1, 2), std::optional<std::uintptr_t>{0x5000});
  imports.add(1, 2, 0x5000);  // a concurrent import of the same block
  EXPECT_EQ(imports.close(0x5000), import_close::still_open);
  EXPECT_EQ(imports.close(0x5000), import_close::still_open);
  EXPECT_EQ(imports.close(0x5000), import_close::last_close);
  EXPECT_EQ(imports.close(0x5000), import_close::not_imported);
  EXPECT_FALSE(imports.contains(0x5000));
  EXPECT_FALSE(imports.reopen(1, 2).has_value());
}

TEST(IpcImports, PoolsByExporterDeviceAndGeneration)
{
  ipc_imports imports;
  int a = 0;
  int b = 0;
  ASSERT_TRUE(imports.keep_pool(1, 0, 1, &a));
  EXPECT_EQ(imports.pool(1, 0, 1), std::optional<void*>{&a});
  EXPECT_FALSE(imports.pool(1, 0, 2).has_value());
  EXPECT_FALSE(imports.pool(2, 0, 1).has_value());
  ASSERT_TRUE(imports.keep_pool(1, 0, 2, &b));
  EXPECT_EQ(imports.pool(1, 0, 2), std::optional<void*>{&b});
}

}  // namespace
