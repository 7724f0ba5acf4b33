#include "engine/planner.h"

#include <algorithm>

namespace arrow_gpu::engine {
int64_t ChunkSizes::For(int64_t planned) const {
  int64_t size = largest;
  if (grow) size = std::min(size, planned);
  if (shrink) size = std::min(size, (total - planned) / 2);
  return std::clamp(AlignUp(size, kAlignment), smallest, largest);
}

int64_t ChunkSizes::TaskBytesFor(int64_t chunk) const {
  return std::clamp(chunk / 4, kAlignment, std::max(largest_task, kAlignment));
}

void Plan(const std::vector<Piece>& pieces, const ChunkSizes& sizes, std::vector<Part>* parts,
          std::vector<Chunk>* chunks) {
  // Room for about as many parts and chunks as follow (cutting at pages at most doubles the
  // parts): growing the vectors as they fill cost a large upload a third of its planning.
  const int64_t most_parts = (sizes.host_page > 0 ? 2 : 1) * sizes.total /
                             std::max(sizes.largest_task, kAlignment);
  parts->reserve(parts->size() + pieces.size() + static_cast<size_t>(most_parts) + 64);
  chunks->reserve(chunks->size() + static_cast<size_t>(sizes.total / sizes.largest) + 64);
  size_t chunk_begin = 0;
  int64_t cursor = 0, payload = 0, planned = 0;
  int64_t limit = sizes.For(0), task_bytes = sizes.TaskBytesFor(limit);
  uintptr_t region_begin = 0, region_end = 0;
  auto close = [&] {
    if (parts->size() > chunk_begin) {
      chunks->push_back({chunk_begin, parts->size(), payload, task_bytes});
    }
    chunk_begin = parts->size();
    planned += payload;
    cursor = payload = 0;
    limit = sizes.For(planned);
    task_bytes = sizes.TaskBytesFor(limit);
  };
  for (const Piece& piece : pieces) {
    int64_t done = 0;
    while (done < piece.size) {
      uintptr_t here = piece.device + done;
      int64_t offset = AlignUp(cursor, kAlignment);
      bool joins = false;
      if (parts->size() > chunk_begin && piece.region_begin == region_begin &&
          piece.region_end == region_end && region_end > region_begin) {
        const Part& last = parts->back();
        uintptr_t last_end = last.device + last.size;
        if (here >= last_end && here - last_end <= static_cast<uintptr_t>(kMaxGap)) {
          offset = last.slot_offset + last.size + static_cast<int64_t>(here - last_end);
          joins = true;
        }
      }
      if (offset >= limit) {
        close();
        continue;
      }
      int64_t n = std::min({limit - offset, piece.size - done, task_bytes});
      const bool file = piece.FromFile();
      if (sizes.host_page > 0 && !file) {
        const int64_t page = sizes.host_page;
        const int64_t to_page =
            page - static_cast<int64_t>(reinterpret_cast<uintptr_t>(piece.host + done) % page);
        if (n > to_page) {
          n = to_page;  // the rest of this page: the next part starts on one
        } else if (n == limit - offset && n < std::min(piece.size - done, to_page) &&
                   payload > 0 && task_bytes >= page) {
          close();  // the slot's end falls inside a page: the next chunk starts on it
          continue;
        }
      }
      parts->push_back({file ? nullptr : piece.host + done, here, n, offset, joins,
                        file ? piece.file.Skip(done) : FileRange{}});
      region_begin = piece.region_begin;
      region_end = piece.region_end;
      cursor = offset + n;
      payload += n;
      done += n;
      if (cursor >= limit) close();
    }
  }
  close();
}

std::vector<Task> Tasks(const std::vector<Part>& parts, const std::vector<Chunk>& chunks) {
  std::vector<Task> tasks;
  tasks.reserve(parts.size());  // at most one task a part
  for (size_t c = 0; c < chunks.size(); ++c) {
    size_t begin = chunks[c].begin;
    int64_t bytes = 0;
    for (size_t k = chunks[c].begin; k < chunks[c].end; ++k) {
      bytes += parts[k].size;
      if (bytes >= chunks[c].task_bytes || k + 1 == chunks[c].end) {
        tasks.push_back({c, begin, k + 1});
        begin = k + 1;
        bytes = 0;
      }
    }
  }
  return tasks;
}

}  // namespace arrow_gpu::engine
