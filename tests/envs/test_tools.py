import pytest

from rlvr.envs.tools import (
    TOOLS,
    Calculator,
    PythonTool,
    Search,
    ToolCall,
    ToolCallError,
    describe_tools,
    function_schema,
    parse_tool_calls,
    snippet,
    truncate,
)
from rlvr.rewards.sandbox import Limits, SandboxUnavailableError


class Lookup:
    """A tool with an optional and a typed argument, to exercise the argument checks."""

    name = "lookup"
    description = "Look a key up."
    parameters = {
        "type": "object",
        "properties": {"key": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["key"],
        "additionalProperties": False,
    }

    def __call__(self, arguments):
        return arguments["key"]


TOOLSET = {"calculator": Calculator(), "lookup": Lookup()}


def calls(text):
    return parse_tool_calls(text, TOOLSET)


def test_parse_one_call_with_text_around_it():
    text = 'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call> ok'
    assert calls(text) == [ToolCall("calculator", {"expression": "2+2"})]


def test_parse_several_calls_in_order_with_qwen_newlines():
    text = (
        '<tool_call>\n{"name": "lookup", "arguments": {"key": "a", "limit": 3}}\n</tool_call>\n'
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1"}}\n</tool_call>'
    )
    assert calls(text) == [
        ToolCall("lookup", {"key": "a", "limit": 3}),
        ToolCall("calculator", {"expression": "1"}),
    ]


def test_no_tags_no_calls_and_unclosed_final_tag_counts():
    assert calls('{"name": "lookup", "arguments": {"key": "a"}} #### 4') == []
    # Engines that stop on "</tool_call>" leave the closing tag off.
    assert calls('<tool_call>{"name": "lookup", "arguments": {"key": "a"}}') == [
        ToolCall("lookup", {"key": "a"})
    ]


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "lookup", "parameters": {"key": "a"}}',  # Llama 3.1's native call
        '\n<|python_tag|>{"name": "lookup", "parameters": {"key": "a"}}  ',
        '{"name": "lookup", "arguments": {"key": "a"}}',
    ],
)
def test_a_reply_that_is_one_json_call_is_a_call(text):
    assert calls(text) == [ToolCall("lookup", {"key": "a"})]


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "lookup"}',  # neither parameters nor arguments: not a call
        '{"key": "a", "parameters": {}}',
        '{"name": "lookup", "parameters": {"key": "a"}',  # not JSON: an answer, not a call
        'The call is {"name": "lookup", "parameters": {"key": "a"}}',
        "[1, 2]",
    ],
)
def test_json_that_is_not_the_whole_reply_or_not_a_call_is_no_call(text):
    assert calls(text) == []


def test_tags_win_over_a_json_reply_and_errors_name_the_format_used():
    tagged = '<tool_call>{"name": "lookup", "arguments": {"key": "b"}}</tool_call>'
    assert calls(tagged) == [ToolCall("lookup", {"key": "b"})]
    with pytest.raises(ToolCallError, match=r'write \{"name": \.\.\., "parameters": \{\.\.\.\}\}$'):
        calls('<|python_tag|>lookup.call(key="a")')
    with pytest.raises(ToolCallError, match="unknown tool 'serch'"):
        calls('{"name": "serch", "parameters": {"key": "a"}}')
    with pytest.raises(ToolCallError, match="tool 'lookup': arguments must be a JSON object"):
        calls('<|python_tag|>{"name": "lookup", "parameters": "key=a"}')


def test_function_schema_and_its_description():
    schema = function_schema(Lookup())
    assert schema == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a key up.",
            "parameters": Lookup.parameters,
        },
    }
    assert describe_tools([schema]) == (
        'Call a tool by replying <tool_call>{"name": ..., "arguments": {...}}</tool_call>; '
        "its result comes back. Tools:\nlookup(key: string, limit?: integer): Look a key up."
    )


def test_render_round_trips():
    call = ToolCall("lookup", {"key": "x y", "limit": 2})
    assert (
        call.render()
        == '<tool_call>{"name": "lookup", "arguments": {"key": "x y", "limit": 2}}</tool_call>'
    )
    assert calls("prefix " + call.render()) == [call]


@pytest.mark.parametrize(
    "body, message",
    [
        ('{"name": "lookup", "arguments": {"key": "a"}', "invalid JSON"),
        ("lookup(key='a')", "invalid JSON"),
        ('["lookup", {"key": "a"}]', "malformed tool call: expected <tool_call>"),
        ('{"arguments": {"key": "a"}}', "malformed tool call"),
        ('{"name": "serch", "arguments": {"key": "a"}}', "unknown tool 'serch'; available: calculator, lookup"),
        ('{"name": "lookup"}', "tool 'lookup': missing argument(s) key"),
        ('{"name": "lookup", "arguments": {}}', "missing argument(s) key"),
        ('{"name": "lookup", "arguments": "key=a"}', "arguments must be a JSON object"),
        ('{"name": "lookup", "arguments": {"key": "a", "k": 1}}', "unknown argument(s) k; it takes key, limit"),
        ('{"name": "lookup", "arguments": {"key": 5}}', "argument 'key' must be a string"),
        ('{"name": "lookup", "arguments": {"key": "a", "limit": "3"}}', "'limit' must be a integer"),
        ('{"name": "lookup", "arguments": {"key": "a", "limit": true}}', "'limit' must be a integer"),
    ],
)  # fmt: skip
def test_bad_calls_raise_a_message_for_the_model(body, message):
    with pytest.raises(ToolCallError) as e:
        calls(f"text <tool_call>{body}</tool_call>")
    assert message in str(e.value)


def test_first_bad_call_raises_even_after_good_ones():
    good = ToolCall("lookup", {"key": "a"}).render()
    with pytest.raises(ToolCallError, match="unknown tool"):
        calls(good + '<tool_call>{"name": "nope", "arguments": {}}</tool_call>')


@pytest.mark.parametrize(
    "expression, result",
    [
        ("1+2*3", "7"),
        ("(3 + 4.5) * 2 ** 3", "60"),
        ("0.1 + 0.2", "0.3"),  # exact decimals, not floats
        ("7/2", "3.5"),
        ("1/3", "0.333333333333"),
        ("1/3*3", "1"),
        ("10 % 3", "1"),
        ("-2**2", "-4"),
        ("2**-1", "0.5"),
        ("2**3**2", "512"),
        ("2**0.5", "1.41421356237"),
        ("((-5))", "-5"),
        ("1**1000000", "1"),
        ("2**1000", str(2**1000)),
        ("1/0", "error: division by zero"),
        ("5 % (2-2)", "error: division by zero"),
        ("0**-1", "error: division by zero"),
        ("0**-0.5", "error: division by zero"),
        ("-7 % 3", "2"),
        ("9**9**9", "error: result too large"),
        ("10**400", "error: result too large"),
        ("(-8)**(1/3)", "error: fractional power of a negative number"),
        ("__import__('os')", "error: only numbers, + - * / ** % and parentheses are allowed"),
        ("3 // 2", "error: only numbers, + - * / ** % and parentheses are allowed"),
        ("1e9", "error: only numbers, + - * / ** % and parentheses are allowed"),
        ("2 +", "error: not a valid expression"),
        ("1" * 201, "error: expression longer than 200 characters"),
    ],
)
def test_calculator(expression, result):
    assert Calculator()({"expression": expression}) == result


@pytest.fixture(scope="module")
def python_tool(skip_without_namespaces):
    try:
        return PythonTool(
            Limits(wall_seconds=1.5, cpu_seconds=1.0, max_output_kb=64), max_chars=200
        )
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)


def test_python_tool_output(python_tool):
    assert python_tool({"code": "print(sum(range(10)))"}) == "45"
    assert python_tool({"code": "x = 1"}) == "(no output)"


def test_python_tool_error_keeps_the_traceback_end(python_tool):
    result = python_tool({"code": "print('before')\n1/0"})
    assert result.startswith("before\nstderr:\nTraceback")
    assert result.endswith("ZeroDivisionError: division by zero\nexit code 1")


def test_python_tool_runs_isolated(python_tool):
    code = "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), 1)\nexcept OSError:\n    print('blocked')"
    assert python_tool({"code": code}) == "blocked"


def test_python_tool_timeout_and_truncation(python_tool):
    assert python_tool({"code": "print('hi', flush=True)\nwhile True: pass"}).startswith(
        "hi\ntimed out"
    )
    long = python_tool({"code": "print('a' * 5000)"})
    assert len(long) < 260 and "characters cut" in long and long.startswith("a" * 100)


DOCS = {
    "Ostwick": "Town on the river Lune. Founded 1300.",
    "Lune": "A river that flows past Ostwick and Halby into the sea.",
    "Halby": "Village on the Lune with a famous bridge over the river.",
}


def test_search_ranks_and_formats():
    search = Search(DOCS, top_k=2, snippet_chars=30)
    assert search.rank("Ostwick") == ["Ostwick", "Lune"]
    assert search.rank("bridge") == ["Halby"]
    assert search({"query": "famous bridge"}) == "Halby: Village on the Lune with a..."


def test_search_without_matches():
    search = Search(DOCS)
    assert search({"query": "zeppelin"}) == "no results"
    assert search({"query": "the of and"}) == "no results"  # stopwords only
    assert search({"query": ""}) == "no results"


def test_snippet_and_truncate():
    assert snippet("short text", 80) == "short text"
    assert snippet("one two three four", 12) == "one two..."
    assert truncate("x" * 10, 10) == "x" * 10
    assert truncate("a" * 10 + "b" * 10, 10) == "aaaaa\n...[10 characters cut]...\nbbbbb"


def test_registry_builds_working_tools():
    for name, factory in TOOLS.items():
        try:
            tool = factory()
        except SandboxUnavailableError:
            continue
        assert tool.name == name and tool.description and "\n" not in tool.description
        assert tool.parameters["type"] == "object" and tool.parameters["required"]
    assert TOOLS["search"]()({"query": "Varholt"}).startswith("Varholt: Town on the river")
