// BlockArena: a protobuf arena whose first block is part of the object (on the stack, or inside the object
// that owns the parsed message), so that parsing a message that fits allocates nothing; a larger one takes
// further blocks from the heap, freed with the arena. The peer transport parses every frame onto one, and
// the forwarder every served request and every answer it reads.
//
//   BlockArena<2048> arena;
//   auto* frame = arena.Create<transport::Frame>();
//   frame->ParseFromArray(data, size);  // valid until `arena` is destroyed
//
// Not copyable or movable (the arena points into the object). Thread safety: as google::protobuf::Arena
// (allocation is thread-safe).
#ifndef RINGLIMIT_NODE_PEER_BLOCK_ARENA_H_
#define RINGLIMIT_NODE_PEER_BLOCK_ARENA_H_

#include <google/protobuf/arena.h>

#include <array>
#include <cstddef>

namespace ringlimit::peer {

template <size_t kBlockBytes>
class BlockArena {
 public:
  BlockArena() : arena_(Options(block_)) {}
  BlockArena(const BlockArena&) = delete;
  BlockArena& operator=(const BlockArena&) = delete;

  [[nodiscard]] google::protobuf::Arena* get() { return &arena_; }
  // A new, empty message of type M on the arena, destroyed with it.
  template <typename M>
  [[nodiscard]] M* Create() {
    return google::protobuf::Arena::CreateMessage<M>(&arena_);
  }

 private:
  static google::protobuf::ArenaOptions Options(std::array<char, kBlockBytes>& block) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block.data();
    options.initial_block_size = block.size();
    return options;
  }

  alignas(16) std::array<char, kBlockBytes> block_;  // declared before arena_: it exists when arena_ is built
  google::protobuf::Arena arena_;
};

}  // namespace ringlimit::peer

#endif  // RINGLIMIT_NODE_PEER_BLOCK_ARENA_H_
