// `llama2 train-tokenizer`: the project's SentencePiece trainer (tools/train_tokenizer.h) on a
// corpus of the user's, e.g. the trained model's tokenizer (models/README.md).
#include <iostream>
#include <string>

#include "common/check.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"
#include "tools/train_tokenizer.h"

namespace llama2 {

int run_train_tokenizer(int argc, char** argv) {
  cxxopts::Options opts("llama2 train-tokenizer",
                        "Train a SentencePiece BPE tokenizer with the Llama conventions (unk 0, "
                        "bos 1, eos 2, byte fallback, identity normalisation). Deterministic.");
  opts.add_options()("corpus", "UTF-8 text, one sentence or paragraph per line",
                     cxxopts::value<std::string>())("o,out", "Output file, ending in .model",
                                                    cxxopts::value<std::string>())(
      "vocab", "Vocabulary size", cxxopts::value<int>()->default_value("4096"))(
      "character-coverage", "Share of the corpus's characters kept as pieces, in (0, 1]",
      cxxopts::value<double>()->default_value("0.9995"))("h,help", "Show this help");
  const auto args = parse_or_usage(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << std::endl;
    return 0;
  }
  if (!args.count("corpus")) throw UsageError("--corpus is required", opts.help());
  if (!args.count("out")) throw UsageError("--out is required", opts.help());
  const std::string out = args["out"].as<std::string>();
  const std::string suffix = ".model";
  if (out.size() <= suffix.size() ||
      out.compare(out.size() - suffix.size(), suffix.size(), suffix)) {
    throw UsageError("--out must name a file ending in .model (got \"" + out + "\")", opts.help());
  }
  const int vocab = args["vocab"].as<int>();
  train_tokenizer(args["corpus"].as<std::string>(), out.substr(0, out.size() - suffix.size()),
                  vocab, args["character-coverage"].as<double>());
  std::cout << "wrote " << out << " (" << vocab << " pieces)" << std::endl;
  return 0;
}

}  // namespace llama2
