"""Span and attribute names this plugin emits, in one place.

The ``gen_ai.*`` names follow the OpenTelemetry GenAI semantic conventions
(development status; Anthropic flavour: ``gen_ai.usage.input_tokens`` counts
cache reads and cache writes too). ``openinference.*``, ``input.value`` and
``output.value`` are what Arize Phoenix and other OpenInference viewers read.
``groundswell.*`` names are this project's own. They are kept here rather than
imported from ``opentelemetry-semantic-conventions`` because those GenAI names
are still moving between releases; pinning them here keeps dashboards stable.
"""

from __future__ import annotations

# -- gen_ai.* (OpenTelemetry GenAI semantic conventions) -------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_WORKFLOW_NAME = "gen_ai.workflow.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_REQUEST_TOP_K = "gen_ai.request.top_k"
GEN_AI_REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_OUTPUT_TYPE = "gen_ai.output.type"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
# Content: recorded only when capture is on (see the module docs of groundswell_otel).
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
# The span event carrying content when capture is SPAN_AND_EVENT.
GEN_AI_CONTENT_EVENT = "gen_ai.client.inference.operation.details"

PROVIDER_ANTHROPIC = "anthropic"
OP_INVOKE_WORKFLOW = "invoke_workflow"
OP_INVOKE_AGENT = "invoke_agent"
OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"
TOOL_TYPE_FUNCTION = "function"
TOOL_TYPE_EXTENSION = "extension"  # MCP tools: run by a server outside the agent

# -- mcp.* / network.* (OpenTelemetry MCP conventions), on the spans of MCP tool calls ---
MCP_METHOD_NAME = "mcp.method.name"
MCP_SESSION_ID = "mcp.session.id"
MCP_PROTOCOL_VERSION = "mcp.protocol.version"
NETWORK_TRANSPORT = "network.transport"
MCP_TOOLS_CALL = "tools/call"
NETWORK_PIPE = "pipe"  # stdio
NETWORK_TCP = "tcp"  # HTTP

# -- error.* / exception.* (general conventions) ---------------------------------------
ERROR_TYPE = "error.type"
EXCEPTION_EVENT = "exception"
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
# The traceback as Python prints it (frames, then "Type: message").
EXCEPTION_STACKTRACE = "exception.stacktrace"

# -- OpenInference (Arize Phoenix) -----------------------------------------------------
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
# A resource attribute: the Phoenix project a trace is filed under ("default" without it).
OPENINFERENCE_PROJECT_NAME = "openinference.project.name"
INPUT_VALUE = "input.value"
OUTPUT_VALUE = "output.value"
KIND_CHAIN = "CHAIN"
KIND_AGENT = "AGENT"
KIND_LLM = "LLM"
KIND_TOOL = "TOOL"

# -- groundswell.* ---------------------------------------------------------------------
NODE_ID = "groundswell.node.id"
NODE_STATUS = "groundswell.node.status"
RUN_ID = "groundswell.run.id"
ATTEMPT = "groundswell.attempt"
TURNS = "groundswell.turns"
# What the node's model calls cost in USD (groundswell.budget.pricing); absent when unknown.
COST_USD = "groundswell.cost_usd"
CACHE = "groundswell.cache"
# The share of a prompt's input tokens read from Anthropic's prompt cache (0 to 1).
PROMPT_CACHE_SHARE = "groundswell.prompt_cache_share"
CACHE_HIT = "groundswell.cache.hit"
CACHE_KEY = "groundswell.cache.key"
CACHE_AGE_S = "groundswell.cache.age_s"
TOOLSET = "groundswell.toolset"
# On an MCP call's span: the tool's name as the model called it (mcp__<server>__<tool>),
# where gen_ai.tool.name is the server's own; and the server's name.
TOOL_NAME = "groundswell.tool.name"
MCP_SERVER = "groundswell.mcp.server"
REFLECTION_LEVEL = "groundswell.reflection.level"
REFLECTION_STRATEGY = "groundswell.reflection.strategy"
REFLECTION_FAILED_NODE = "groundswell.reflection.failed_node_id"
EVENT_NODE_ID = "groundswell.event.node_id"
INCOMPLETE = "groundswell.incomplete"
# On a chat span: how many of the request's first messages its gen_ai.input.messages
# leaves out, because the tree does not hold them (an earlier conversation continued).
INPUT_MESSAGES_OMITTED = "groundswell.input.messages.omitted"
