"""One typed options module for the Modelfile parser, the daemon and the runner."""

from __future__ import annotations

import pytest

from localllm.options import OPTION_TYPES, CompletionOptions, LoadOptions, OptionError, checked, coerce
from localllm.registry.modelfile import convert_parameters


@pytest.mark.parametrize("name, value, expected", [
    ("num_ctx", 2048, 2048), ("num_ctx", 2048.0, 2048), ("temperature", 1, 1.0), ("use_mmap", False, False),
    ("stop", "END", ["END"]), ("stop", ["a", "b"], ["a", "b"]), ("engine", "native", "native"),
])  # fmt: skip
def test_values_are_typed_by_the_option(name: str, value: object, expected: object) -> None:
    result = coerce(name, value, OPTION_TYPES[name])
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize("name, value, noun", [
    ("num_ctx", 2.5, "a whole number"), ("num_ctx", True, "a whole number"), ("temperature", "hot", "a number"),
    ("use_mmap", 1, "true or false"), ("stop", [1], "a list of strings"), ("engine", 3, "a string"),
])  # fmt: skip
def test_a_wrong_type_names_the_option(name: str, value: object, noun: str) -> None:
    with pytest.raises(OptionError, match=f"option '{name}' must be {noun}"):
        coerce(name, value, OPTION_TYPES[name])


def test_checked_drops_unknown_names_and_nulls_and_checks_the_engine() -> None:
    assert checked({"num_ctx": 512.0, "made_up": 1, "seed": None}) == {"num_ctx": 512}
    with pytest.raises(OptionError, match="option 'engine' must be one of"):
        checked({"engine": "vllm"})


def test_the_modelfile_parser_and_the_runner_agree_on_names_and_types() -> None:
    parameters = convert_parameters([("temperature", "0.5"), ("num_ctx", "1024"), ("stop", "a"), ("stop", "b")])
    assert parameters == checked(parameters)  # what a Modelfile stores passes the daemon's check unchanged
    options = CompletionOptions.from_dict({**parameters, "stop": ["a", "", "b"]})
    assert (options.temperature, options.stop) == (0.5, ("a", "b"))  # empty stop strings never match
    assert LoadOptions.of(parameters) == LoadOptions(num_ctx=1024)


@pytest.mark.parametrize("options, message", [
    ({"top_logprobs": 21}, "between 0 and 20"), ({"mirostat": 3}, "0, 1 or 2"), ("fast", "must be an object"),
])  # fmt: skip
def test_the_runner_refuses_out_of_range_completion_options(options: object, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        CompletionOptions.from_dict(options)
