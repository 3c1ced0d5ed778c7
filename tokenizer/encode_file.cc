// EncodeFilesToTokenFile: plan chunks, then encode them batch by batch on the pool and append in order.
#include "tokenizer/encode_file.h"

#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "tokenizer/corpus_chunks.h"
#include "tokenizer/token_file.h"

namespace lmf::tokenizer {

absl::StatusOr<EncodeFileStats> EncodeFilesToTokenFile(const Tokenizer& tokenizer,
                                                       const std::vector<std::string>& inputs,
                                                       const std::string& output, const EncodeFileOptions& options) {
  if (inputs.empty()) return absl::InvalidArgumentError("no input files to encode");
  ThreadPool& pool = options.pool != nullptr ? *options.pool : ThreadPool::Default();
  auto chunks = PlanCorpusChunks(inputs, tokenizer.specials(), options.chunk_bytes);
  if (!chunks.ok()) return chunks.status();
  std::vector<CorpusFile> files;
  uint64_t total = 0;
  for (const std::string& path : inputs) {
    auto f = CorpusFile::Open(path);
    if (!f.ok()) return f.status();
    total += f->size();
    files.push_back(std::move(*f));
  }
  auto writer = TokenFileWriter::Create(output, tokenizer.vocab_size(), tokenizer.Hash());
  if (!writer.ok()) return writer.status();

  // Encoders (with their caches) live across batches; a task borrows a free one.
  std::mutex mu;
  std::vector<std::unique_ptr<Encoder>> encoders;
  std::vector<Encoder*> free_encoders;
  auto borrow = [&]() {
    std::lock_guard<std::mutex> lock(mu);
    if (free_encoders.empty()) {
      encoders.push_back(std::make_unique<Encoder>(tokenizer));
      return encoders.back().get();
    }
    Encoder* e = free_encoders.back();
    free_encoders.pop_back();
    return e;
  };
  auto give_back = [&](Encoder* e) {
    std::lock_guard<std::mutex> lock(mu);
    free_encoders.push_back(e);
  };

  const size_t batch = static_cast<size_t>(std::max(1, pool.num_threads() * std::max(1, options.chunks_per_thread)));
  std::vector<std::vector<uint32_t>> ids(batch);
  std::vector<absl::Status> errors(batch);
  EncodeFileStats stats;
  for (size_t first = 0; first < chunks->size(); first += batch) {
    const size_t n = std::min(batch, chunks->size() - first);
    pool.RunTasks(static_cast<int64_t>(n), [&](int64_t k) {
      const CorpusChunk& c = (*chunks)[first + k];
      std::string text;
      errors[k] = files[c.file_index].Read(c.begin, c.end, &text);
      ids[k].clear();
      if (!errors[k].ok()) return;
      Encoder* encoder = borrow();
      encoder->Encode(text, /*allow_specials=*/true, &ids[k]);
      give_back(encoder);
    });
    for (size_t k = 0; k < n; ++k) {
      if (!errors[k].ok()) return errors[k];
      if (absl::Status s = writer->Append(ids[k].data(), ids[k].size()); !s.ok()) return s;
      const CorpusChunk& c = (*chunks)[first + k];
      stats.bytes += c.end - c.begin;
      stats.tokens += ids[k].size();
    }
    if (options.progress) options.progress(stats.bytes, total, stats.tokens);
  }
  if (absl::Status s = writer->Commit(); !s.ok()) return s;
  return stats;
}

}  // namespace lmf::tokenizer
