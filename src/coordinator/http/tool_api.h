// Tool calls in the OpenAI chat answers (docs/tool-calling.md): a finished answer's calls as
// message.tool_calls, and a streamed answer's as OpenAI's deltas, both read from the model's
// text by ToolCallReader (requests/request_tools.h), so the two agree.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "coordinator/http/openai_api.h"
#include "coordinator/requests/request_tools.h"

namespace llama2 {

// The chunks for what the reader made of one token's text: its content (with `logprobs`, which
// also goes out alone when the token added nothing to send), then one chunk per call delta:
// {"index", "id", "type", "function": {"name", "arguments": ""}} first, then {"index",
// "function": {"arguments": piece}}.
std::vector<nlohmann::json> api_tool_chunks(const ApiResponseHead& h,
                                            const ToolCallReader::Output& out, bool with_usage_null,
                                            const nlohmann::json& logprobs = nullptr);

// The last choice chunk: finish_reason "tool_calls" when the answer's calls are complete and it
// ended at the grammar's end, else api_finish_reason's.
nlohmann::json api_tool_last_chunk(const ApiResponseHead& h, const ToolCallReader& reader,
                                   FinishReason finish_reason, bool with_usage_null);

}  // namespace llama2
