// What every process group backend's Connect takes (GlooGroup, NcclGroup): the group's name, this rank's
// place, where the ranks meet and how long they wait. Each backend's options derive from it and add their
// own fields (GlooGroupOptions: the address to listen on, an abort check; NcclGroupOptions: the device).
#ifndef LMFORGE_DISTRIBUTED_GROUP_OPTIONS_H_
#define LMFORGE_DISTRIBUTED_GROUP_OPTIONS_H_

#include <chrono>
#include <string>

namespace lmf::distributed {

struct GroupOptions {
  std::string name = "world";  // names the group in errors
  int rank = 0;
  int world_size = 1;
  // Where the ranks meet: a folder shared by all ranks (created if missing), or else a TCP store at
  // store_host:store_port (tcp_store.h) that rank 0 serves for the group's life.
  std::string rendezvous_dir;
  std::string store_host;
  int store_port = 0;
  std::chrono::milliseconds timeout{30000};  // each op's, unless its CallOptions say otherwise
  // How long Connect waits for the other ranks (each backend says for what exactly).
  std::chrono::milliseconds connect_timeout{30000};
};

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_GROUP_OPTIONS_H_
