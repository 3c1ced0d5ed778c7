// The TCP store: what one client sets another gets (and sees with Has), a wait for a key another client sets
// later returns, a wait for a key nobody sets times out naming it, a port in use is refused naming it, and a
// client with no server gives up after its connect timeout naming the address.
#include "distributed/tcp_store.h"

#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

std::unique_ptr<TcpRendezvousStore> Client(int port) {
  absl::StatusOr<std::unique_ptr<TcpRendezvousStore>> client =
      TcpRendezvousStore::Connect("127.0.0.1", port, std::chrono::seconds(5), nullptr);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

TEST(TcpStore, ClientsShareKeysAndWaitForThem) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<TcpRendezvousStore> a = Client((*server)->port()), b = Client((*server)->port());
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(b->Has("k"));
  const std::vector<char> value = {'x', '\0', 'y'};
  a->set("k", value);
  EXPECT_TRUE(b->Has("k"));
  EXPECT_EQ(b->get("k"), value);
  a->set("empty", {});
  EXPECT_EQ(b->get("empty"), std::vector<char>{});
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    a->set("later", {'1'});
  });
  b->wait({"later"}, std::chrono::seconds(5));
  later.join();
  EXPECT_EQ(b->get("later"), std::vector<char>{'1'});
  try {
    b->wait({"never"}, std::chrono::milliseconds(300));
    ADD_FAILURE() << "waited for a key nobody set";
  } catch (const gloo::IoException& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "Wait timeout for key(s): never after 300 ms")) << e.what();
  }
}

TEST(TcpStore, APortInUseAndAMissingServerAreNamed) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> second = TcpStoreServer::Start("127.0.0.1", port);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), absl::StrCat("cannot listen on 127.0.0.1:", port)))
      << second.status();
  server->reset();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<TcpRendezvousStore>> client =
      TcpRendezvousStore::Connect("127.0.0.1", port, std::chrono::milliseconds(500), nullptr);
  ASSERT_FALSE(client.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_TRUE(absl::StrContains(client.status().message(),
                                absl::StrCat("the TCP store at 127.0.0.1:", port, " (MASTER_ADDR:MASTER_PORT) did not accept")))
      << client.status();
}

}  // namespace
}  // namespace lmf::distributed
