#include "coordinator/http/tool_api.h"

namespace llama2 {

using nlohmann::json;

std::vector<json> api_tool_chunks(const ApiResponseHead& h, const ToolCallReader::Output& out,
                                  bool with_usage_null, const json& logprobs) {
  std::vector<json> chunks;
  if (!out.text.empty() || (!logprobs.is_null() && out.deltas.empty()))
    chunks.push_back(api_chunk(h, out.text, false, nullptr, with_usage_null, logprobs));
  for (const ToolCallReader::Delta& d : out.deltas) {
    json call{{"index", d.index}};
    if (!d.name.empty()) {
      call["id"] = d.id;
      call["type"] = "function";
      call["function"] = {{"name", d.name}, {"arguments", d.arguments}};
    } else {
      call["function"] = {{"arguments", d.arguments}};
    }
    // Logprobs ride on the token's first chunk when it carried no text.
    const bool lp_here = &d == &out.deltas.front() && out.text.empty();
    json chunk = api_chunk(h, "", false, nullptr, with_usage_null, lp_here ? logprobs : json());
    chunk["choices"][0]["delta"]["tool_calls"] = json::array({call});
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

json api_tool_last_chunk(const ApiResponseHead& h, const ToolCallReader& reader,
                         FinishReason finish_reason, bool with_usage_null) {
  json chunk = api_chunk(h, "", false, &finish_reason, with_usage_null);
  if (reader.complete() && finish_reason == FinishReason::kStop)
    chunk["choices"][0]["finish_reason"] = "tool_calls";
  return chunk;
}

}  // namespace llama2
