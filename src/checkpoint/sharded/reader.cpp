#include "checkpoint/sharded/reader.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "checkpoint/io/atomic_file.h"
#include "checkpoint/io/note.h"
#include "checkpoint/sharded/object_record.h"
#include "util/io.h"
#include "core/check.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace fs = std::filesystem;

namespace rankwise::checkpoint::sharded {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

ShardedReader::ShardedReader(std::string dir, std::string operation, ShardedLoadOptions keys)
    : dir_(std::move(dir)), operation_(std::move(operation)), keys_(keys) {
  label_ = core::where({dist::rank_or_zero(), dist::world_size_or_one()});
}

ShardedReader::~ShardedReader() {
  for (auto& [name, fd] : files_) ::close(fd);
}

void ShardedReader::fail(const std::string& why) const {
  core::raise<CheckpointError>("{}: {}('{}'): {}", label_, operation_, dir_, why);
}

// Runs `parse`; its CheckpointError ("rankwise: <what>") gets this rank and operation in front.
template <typename Parse>
void ShardedReader::relabelled(const Parse& parse) const {
  try {
    parse();
  } catch (const CheckpointError& e) {
    fail(core::unprefixed(e.what()));
  }
}

CheckpointFiles ShardedReader::read_files() const {
  std::error_code ec;
  if (fs::is_regular_file(dir_, ec)) {
    fail("this is a file, not a sharded checkpoint directory (a replicated checkpoint file is read by "
         "rankwise::checkpoint::load)");
  }
  if (!fs::is_directory(dir_, ec)) fail("there is no directory at this path");
  if (!fs::exists(fs::path(dir_) / kMetadataName, ec)) {
    fail("the directory has no .metadata, so it is not a sharded checkpoint (a replicated checkpoint file is "
         "read by rankwise::checkpoint::load)");
  }
  CheckpointFiles files;
  files.metadata = io::read_file(dir_ + "/" + kMetadataName);
  files.has_manifest = fs::exists(fs::path(dir_) / kManifestName, ec);
  if (files.has_manifest) files.manifest = io::read_file(dir_ + "/" + kManifestName);
  return files;
}

void ShardedReader::open(const CheckpointFiles& files) {
  if (files.has_manifest) {
    relabelled([&] { manifest_ = manifest_from_json(files.manifest, dir_ + "/" + kManifestName); });
    const uint32_t crc = crc32_of(files.metadata.data(), files.metadata.size());
    if (crc != manifest_->metadata_crc32) {
      fail(fmt::format("checksum mismatch in '.metadata': the manifest records CRC-32 {:08x}, the file has {:08x}. "
                       "The checkpoint is damaged; load an earlier one",
                       manifest_->metadata_crc32, crc));
    }
    for (const auto& c : manifest_->chunks) manifest_chunks_[{c.key, c.offsets}] = &c;
  }
  relabelled([&] { metadata_ = unpickle_dcp_metadata(files.metadata, dir_ + "/" + kMetadataName); });
  if (!files.has_manifest && operation_ != "read_sharded_metadata") {
    io::note(
        core::message("{}('{}'): no {}, so nothing read from it is verified (a directory Python's "
                      "dcp.save wrote has none; one rankwise wrote has lost it)",
                      operation_, dir_, kManifestName));
  }
}

ShardedReader::Overlap ShardedReader::overlap(const DcpChunk& c, const TensorChunk& want) {
  const std::size_t dims = c.offsets.size();
  Overlap o;
  o.lo.resize(dims);
  o.len.resize(dims);
  o.count = 1;
  for (std::size_t d = 0; d < dims; ++d) {
    o.lo[d] = std::max(c.offsets[d], want.offsets[d]);
    const int64_t hi = std::min(c.offsets[d] + c.sizes[d], want.offsets[d] + want.data.size(static_cast<int64_t>(d)));
    o.len[d] = std::max<int64_t>(0, hi - o.lo[d]);
    o.count *= o.len[d];
  }
  return o;
}

std::vector<Piece> ShardedReader::plan(ShardedState& state) const {
  std::vector<std::string> missing, extra, kinds;
  for (const auto& [key, entry] : state) {
    const bool object = std::holds_alternative<ObjectEntry>(entry);
    if (!metadata_.tensors.count(key) && !metadata_.objects.count(key)) {
      missing.push_back(key);
    } else if (object != (metadata_.objects.count(key) > 0)) {
      kinds.push_back(fmt::format("'{}' is {} in the checkpoint, {} in the state to load", key,
                                  object ? "a tensor" : "an object (a non-tensor value)",
                                  object ? "an ObjectEntry" : "a tensor"));
    }
  }
  for (const auto& [key, tensor] : metadata_.tensors) {
    if (!state.count(key)) extra.push_back(key);
  }
  for (const auto& [key, object] : metadata_.objects) {
    if (!state.count(key)) extra.push_back(key + " (an object)");
  }
  if (keys_.allow_partial_load() && !missing.empty()) {
    io::note(core::message("note: {}('{}'): not in the checkpoint, left as they were "
                           "(allow_partial_load): [{}]",
                           operation_, dir_, fmt::join(missing, ", ")));
    missing.clear();
  }
  if (!keys_.strict()) extra.clear();
  if (!missing.empty() || !extra.empty()) {
    std::vector<std::string> parts;
    if (!missing.empty()) parts.push_back(fmt::format("wanted but not in the checkpoint: [{}]", fmt::join(missing, ", ")));
    if (!extra.empty()) parts.push_back(fmt::format("in the checkpoint but not wanted: [{}]", fmt::join(extra, ", ")));
    fail(fmt::format("the keys differ: {}. Pass exactly the checkpoint's keys (read_sharded_metadata() lists "
                     "them), or see ShardedLoadOptions: strict(false) skips the checkpoint's other keys, "
                     "allow_partial_load(true) leaves the state's own keys as they are",
                     fmt::join(parts, "; ")));
  }
  if (!kinds.empty()) fail(fmt::format("{}", fmt::join(kinds, "; ")));
  std::vector<Piece> pieces;
  for (auto& [key, entry] : state) {
    if (std::holds_alternative<ObjectEntry>(entry) || !metadata_.tensors.count(key)) continue;
    const DcpTensor& stored = metadata_.tensors.at(key);
    std::vector<int64_t> shape;
    c10::ScalarType dtype;
    std::vector<TensorChunk> wanted;
    if (const auto* sharded = std::get_if<ShardedTensor>(&entry)) {
      shape = sharded->global_shape();
      dtype = sharded->dtype();
      wanted = sharded->chunks();
    } else {
      const auto& tensor = std::get<at::Tensor>(entry);
      if (!tensor.defined()) fail("replicated tensor '" + key + "' is undefined: pass a tensor to fill");
      shape = tensor.sizes().vec();
      dtype = tensor.scalar_type();
      wanted.push_back(TensorChunk{std::vector<int64_t>(shape.size(), 0), tensor});
    }
    if (shape != stored.size || dtype != stored.dtype) {
      fail(fmt::format("'{}' is {} {} in the checkpoint, {} {} in the state to load", key,
                       c10::toString(stored.dtype), shape_text(stored.size), c10::toString(dtype), shape_text(shape)));
    }
    for (const auto& want : wanted) {
      const int64_t needed = want.data.numel();
      if (needed == 0) continue;
      int64_t covered = 0;
      for (const auto& c : stored.chunks) {
        const int64_t n = overlap(c, want).count;
        if (n == 0) continue;
        covered += n;
        pieces.push_back(Piece{key, &c, want});
      }
      if (covered != needed) {
        fail(fmt::format("the stored chunks of '{}' give {} of the {} elements of the chunk at offsets {} with sizes "
                         "{} (they do not cover it, or overlap)",
                         key, covered, needed, shape_text(want.offsets), shape_text(want.data.sizes().vec())));
      }
    }
  }
  return pieces;
}

std::vector<ByteRange> ShardedReader::record_ranges(const std::vector<Piece>& pieces) const {
  std::vector<ByteRange> out;
  std::set<std::pair<std::string, int64_t>> seen;
  for (const auto& p : pieces) {
    const DcpChunk& c = *p.stored;
    if (!seen.insert({c.relative_path, c.offset}).second) continue;
    if (const auto* m = manifest_chunk(p.key, c)) {
      const int64_t trailer = m->data_begin + m->data_size;
      out.push_back(ByteRange{c.relative_path, c.offset, m->data_begin});
      out.push_back(ByteRange{c.relative_path, c.offset + trailer, c.length - trailer});
    } else {
      out.push_back(ByteRange{c.relative_path, c.offset, c.length});
    }
  }
  return out;
}

std::vector<ByteRange> ShardedReader::object_ranges(const ShardedState& state) const {
  std::vector<ByteRange> out;
  for (const auto& [key, entry] : state) {
    if (!std::holds_alternative<ObjectEntry>(entry) || !metadata_.objects.count(key)) continue;
    const DcpObject& o = metadata_.objects.at(key);
    out.push_back(ByteRange{o.relative_path, o.offset, o.length});
  }
  return out;
}

void ShardedReader::read_objects(ShardedState& state) {
  for (auto& [key, entry] : state) {
    auto* object = std::get_if<ObjectEntry>(&entry);
    if (object == nullptr || !metadata_.objects.count(key)) continue;  // allow_partial_load: left as it was
    const DcpObject& o = metadata_.objects.at(key);
    const std::string what = fmt::format("file '{}', object '{}'", o.relative_path, key);
    const std::string bytes = read_at(o.relative_path, o.offset, o.length);
    if (manifest_) {
      auto it = manifest_chunks_.find({key, std::vector<int64_t>{}});
      if (it == manifest_chunks_.end() || it->second->file != o.relative_path || it->second->offset != o.offset ||
          it->second->length != o.length) {
        fail("the manifest has no checksum for the " + what + ": .metadata and the manifest disagree");
      }
      check_crc(it->second->header_crc32, bytes, "the " + what, o.offset);
    }
    relabelled([&] { object->value = object_from_record(bytes, o.relative_path + ": object " + key); });
  }
}

void ShardedReader::serve_from(std::set<std::string> local, std::vector<std::pair<ByteRange, std::string>> fetched) {
  remote_ = true;
  local_ = std::move(local);
  for (auto& [range, bytes] : fetched) fetched_[range.file].emplace_back(range.offset, std::move(bytes));
}

int ShardedReader::open_file(const std::string& name) {
  auto it = files_.find(name);
  if (it != files_.end()) return it->second;
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    fail("'.metadata' names the data file '" + name + "', which is not a file name inside the directory");
  }
  const std::string path = dir_ + "/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fail("cannot open data file '" + name + "': " + std::strerror(errno) +
         " (a checkpoint saved to node-local disks is read with load_sharded_collective)");
  }
  files_[name] = fd;
  return fd;
}

std::string ShardedReader::read_local(const ByteRange& range) {
  const int fd = open_file(range.file);
  std::string out(static_cast<std::size_t>(range.size), '\0');
  std::size_t done = 0;
  try {
    done = util::pread_all(fd, out.data(), out.size(), static_cast<uint64_t>(range.offset));
  } catch (const std::system_error& e) {
    fail("reading data file '" + range.file + "' failed: " + std::strerror(e.code().value()));
  }
  if (done < out.size()) {
    struct stat info {};
    const std::string length =
        ::fstat(fd, &info) == 0 ? fmt::format("is {} bytes long", static_cast<int64_t>(info.st_size)) : "is shorter";
    fail(fmt::format("data file '{}' {}, but '.metadata' points to its bytes {} to {}: it is truncated; load an "
                     "earlier checkpoint",
                     range.file, length, range.offset, range.offset + range.size));
  }
  return out;
}

std::string ShardedReader::read_at(const std::string& file, int64_t offset, int64_t size) {
  if (!remote_ || local_.count(file)) return read_local(ByteRange{file, offset, size});
  auto it = fetched_.find(file);
  if (it != fetched_.end()) {
    for (const auto& [begin, bytes] : it->second) {
      if (begin <= offset && offset + size <= begin + static_cast<int64_t>(bytes.size())) {
        return bytes.substr(static_cast<std::size_t>(offset - begin), static_cast<std::size_t>(size));
      }
    }
  }
  fail(fmt::format("bytes {}..{} of data file '{}' were neither on this rank's view nor received (a bug in rankwise)",
                   offset, offset + size, file));
}

std::string ShardedReader::chunk_name(const std::string& key, const DcpChunk& c) const {
  return fmt::format("file '{}', tensor '{}', chunk at offsets {}", c.relative_path, key, shape_text(c.offsets));
}

void ShardedReader::check_crc(uint32_t expected, const std::string& bytes, const std::string& what, int64_t at) const {
  const uint32_t crc = crc32_of(bytes.data(), bytes.size());
  if (crc != expected) {
    fail(fmt::format("checksum mismatch in {} (bytes {}..{} of the file): the manifest records CRC-32 {:08x}, the "
                     "bytes have {:08x}. The checkpoint is damaged; load an earlier one",
                     what, at, at + static_cast<int64_t>(bytes.size()), expected, crc));
  }
}

const ManifestChunk* ShardedReader::manifest_chunk(const std::string& key, const DcpChunk& c) const {
  if (!manifest_) return nullptr;
  auto it = manifest_chunks_.find({key, c.offsets});
  if (it == manifest_chunks_.end() || it->second->file != c.relative_path || it->second->offset != c.offset ||
      it->second->length != c.length) {
    fail("the manifest has no checksums for the " + chunk_name(key, c) + ": .metadata and the manifest disagree");
  }
  return it->second;
}

// The record of stored chunk `c`, parsed once; its header and directory verified when there is a manifest.
const torch_save::TensorRecord& ShardedReader::record(const std::string& key, const DcpChunk& c) {
  const auto id = std::make_pair(c.relative_path, c.offset);
  auto it = records_.find(id);
  if (it != records_.end()) return it->second;
  const std::string what = chunk_name(key, c);
  torch_save::TensorRecord r;
  if (const auto* m = manifest_chunk(key, c)) {
    // The bytes before and after the storage (zip headers, data.pkl, directory), verified first.
    const int64_t trailer_begin = m->data_begin + m->data_size;
    if (m->data_begin < 0 || m->data_size < 0 || trailer_begin > c.length) {
      fail("the manifest's entry for the " + what + " is inconsistent");
    }
    const std::string header = read_at(c.relative_path, c.offset, m->data_begin);
    check_crc(m->header_crc32, header, "the record header of the " + what, c.offset);
    const std::string trailer = read_at(c.relative_path, c.offset + trailer_begin, c.length - trailer_begin);
    check_crc(m->trailer_crc32, trailer, "the record trailer of the " + what, c.offset + trailer_begin);
    relabelled([&] {
      r = torch_save::parse_tensor_record(
          [&](int64_t at, int64_t n) -> std::string {
            if (at + n <= m->data_begin) return header.substr(static_cast<std::size_t>(at), static_cast<std::size_t>(n));
            if (at >= trailer_begin) {
              return trailer.substr(static_cast<std::size_t>(at - trailer_begin), static_cast<std::size_t>(n));
            }
            fail("the record of the " + what + " points into its storage for its headers");
          },
          c.length, "the " + what);
    });
    if (r.data_begin != m->data_begin || r.data_size != m->data_size) {
      fail("the record of the " + what + " does not match its manifest entry");
    }
  } else {
    relabelled([&] {
      r = torch_save::parse_tensor_record([&](int64_t at, int64_t n) { return read_at(c.relative_path, c.offset + at, n); },
                              c.length, "the " + what);
    });
  }
  if (r.dtype != metadata_.tensors.at(key).dtype || r.sizes != c.sizes) {
    fail(fmt::format("the {} holds {} {}, .metadata says {} {}", what, c10::toString(r.dtype), shape_text(r.sizes),
                     c10::toString(metadata_.tensors.at(key).dtype), shape_text(c.sizes)));
  }
  return records_.emplace(id, std::move(r)).first->second;
}

ByteRange ShardedReader::data_range(const Piece& piece) {
  const DcpChunk& c = *piece.stored;
  const Overlap o = overlap(c, piece.want);
  const torch_save::TensorRecord& r = record(piece.key, c);
  const int64_t element = static_cast<int64_t>(c10::elementSize(r.dtype));
  int64_t first = r.storage_offset, last = r.storage_offset;
  for (std::size_t d = 0; d < o.lo.size(); ++d) {
    first += (o.lo[d] - c.offsets[d]) * r.strides[d];
    last += (o.lo[d] - c.offsets[d] + o.len[d] - 1) * r.strides[d];
  }
  int64_t begin = first * element, end = (last + 1) * element;  // bytes of the storage
  if (manifest_chunk(piece.key, c) != nullptr) {                 // widen to whole checksum blocks
    begin = begin / manifest_->block_bytes * manifest_->block_bytes;
    end = std::min(r.data_size, (end + manifest_->block_bytes - 1) / manifest_->block_bytes * manifest_->block_bytes);
  }
  return ByteRange{c.relative_path, c.offset + r.data_begin + begin, end - begin};
}

void ShardedReader::copy(const Piece& piece) {
  const DcpChunk& c = *piece.stored;
  const Overlap o = overlap(c, piece.want);
  const torch_save::TensorRecord& r = record(piece.key, c);
  const ByteRange range = data_range(piece);
  const int64_t begin = range.offset - c.offset - r.data_begin;  // in the storage
  const int64_t end = begin + range.size;
  const std::string bytes = read_at(range.file, range.offset, range.size);
  if (const ManifestChunk* m = manifest_chunk(piece.key, c)) {
    for (int64_t b = begin; b < end; b += manifest_->block_bytes) {
      const std::size_t index = static_cast<std::size_t>(b / manifest_->block_bytes);
      if (index >= m->block_crc32.size()) fail("the manifest lacks block checksums for the " + chunk_name(piece.key, c));
      const int64_t n = std::min(manifest_->block_bytes, end - b);
      check_crc(m->block_crc32[index], bytes.substr(static_cast<std::size_t>(b - begin), static_cast<std::size_t>(n)),
                "the " + chunk_name(piece.key, c), c.offset + r.data_begin + b);
    }
  }
  const int64_t element = static_cast<int64_t>(c10::elementSize(r.dtype));
  int64_t first = r.storage_offset;
  for (std::size_t d = 0; d < o.lo.size(); ++d) first += (o.lo[d] - c.offsets[d]) * r.strides[d];
  const at::Tensor source = at::from_blob(const_cast<char*>(bytes.data()) + (first * element - begin), o.len,
                                          r.strides, at::TensorOptions().dtype(r.dtype));
  at::Tensor target = piece.want.data;
  for (std::size_t d = 0; d < o.lo.size(); ++d) {
    target = target.narrow(static_cast<int64_t>(d), o.lo[d] - piece.want.offsets[d], o.len[d]);
  }
  target.copy_(source);
}

}  // namespace rankwise::checkpoint::sharded
