"""kubectl's messages and exit codes (gpuplane_cli.errors, gpuplane_cli.main): HTTP answers,
a server that does not answer, usage errors."""
from __future__ import annotations

import socket
from io import StringIO

import pytest

from gpuplane_cli.errors import APIError, ConnectionFailed, Target, from_api_error, from_connection_failure
from gpuplane_cli.main import main, program_name


@pytest.mark.parametrize(("status", "body", "target", "message"), [
    (401, {"detail": "Invalid token."}, Target("nodes"), "error: You must be logged in to the server (Unauthorized)"),
    (403, {"detail": "Your role does not allow this."}, Target("plans", "3"),
     'Error from server (Forbidden): plans "3" is forbidden: Your role does not allow this.'),
    (403, {"detail": "Your role does not allow this."}, None,
     "Error from server (Forbidden): Your role does not allow this."),
    (404, {"detail": "No Deployment matches the given query."}, Target("deployments", "chat"),
     'Error from server (NotFound): deployments "chat" not found'),
    (409, {"detail": "Cannot start a rollout that is failed: only a pending one."}, Target("rollouts", "r"),
     "Error from server (Conflict): Cannot start a rollout that is failed: only a pending one."),
    (409, {"detail": "Not safe now.", "reasons": ["chat has nowhere to go", "b"], "preview": {}}, Target("rollouts", "r"),
     "Error from server (Conflict): Not safe now.\n* chat has nowhere to go\n* b"),
    (400, {"status": ["Select a valid choice. x is not one of the available choices."]}, Target("deployments"),
     "Error from server (BadRequest): status: Select a valid choice. x is not one of the available choices."),
    (429, {"detail": "Request was throttled. Expected available in 30 seconds."}, None,
     "Error from server (TooManyRequests): Request was throttled. Expected available in 30 seconds."),
    (502, {"detail": "the cluster refused: quota"}, None, "Error from server (BadGateway): the cluster refused: quota"),
    (500, "<html><body>Server Error (500)</body></html>", None,
     "Error from server (InternalError): an error on the server (HTTP 500) has prevented the request from succeeding"),
])
def test_http_answers_read_like_kubectl(status, body, target, message):
    assert from_api_error(APIError(status, body), target).message == message


def test_an_invalid_create_lists_every_field_like_kubectl():
    body = {"memory_gb": ["Enter a number greater than 0."], "config": {"replicas": ["At least 2."]},
            "non_field_errors": ["Give nodes or node_selector."]}
    assert from_api_error(APIError(400, body), Target("deployments", "chat"), creating=True).message == (
        'The deployment "chat" is invalid:\n* memory_gb: Enter a number greater than 0.\n'
        "* config.replicas: At least 2.\n* Give nodes or node_selector.")


def test_a_server_that_does_not_answer():
    refused = ConnectionFailed("http://127.0.0.1:8109", "connection refused", refused=True)
    assert from_connection_failure(refused).message == (
        "The connection to the server 127.0.0.1:8109 was refused - did you specify the right host or port?")
    assert from_connection_failure(ConnectionFailed("https://x", "no answer in time")).message == \
        "Unable to connect to the server: no answer in time"


def run(*argv: str, **environ: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    code = main(list(argv), environ=environ, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_a_closed_port_is_refused_with_exit_1(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = run("--server", f"http://127.0.0.1:{port}", "--token", "t", "get", "nodes",
                         GPUPLANE_CONFIG=str(tmp_path / "config"))
    assert (code, out) == (1, "")
    assert err == f"The connection to the server 127.0.0.1:{port} was refused - did you specify the right host or port?\n"


def test_without_a_server_or_a_token_it_says_how_to_log_in(tmp_path):
    config = str(tmp_path / "config")
    code, _, err = run("get", "nodes", GPUPLANE_CONFIG=config)
    assert code == 1 and err.startswith('error: no server: run "gpuplane login SERVER"')
    code, _, err = run("get", "nodes", GPUPLANE_CONFIG=config, GPUPLANE_SERVER="http://127.0.0.1:9")
    assert code == 1 and err.startswith("error: You must be logged in to the server (Unauthorized)\nNo token:")


@pytest.mark.parametrize(("argv", "first_line", "hint"), [
    (["gett", "nodes"], 'error: unknown command "gett" for "gpuplane"', "Run 'gpuplane --help' for usage."),
    (["get"], "error: the following arguments are required: TYPE", "See 'gpuplane get --help' for usage."),
    (["rollout", "frobnicate", "x"], 'error: unknown command "frobnicate" for "gpuplane rollout"',
     "Run 'gpuplane rollout --help' for usage."),
    (["get", "nodes", "-o", "xml"], "error: argument -o/--output: invalid choice: 'xml' (choose from 'table', "
     "'wide', 'json', 'yaml', 'name')", "See 'gpuplane get --help' for usage."),
    (["plans", "approve", "three"], "error: a plan is named by its id (a number), got 'three'",
     "See 'gpuplane --help' for usage."),
    (["rollout", "create", "r", "--nodes", "a"], "error: give the new sharing mode: --mode (or config.mode in -f)",
     "See 'gpuplane --help' for usage."),
])
def test_usage_errors_exit_1_with_a_hint(argv, first_line, hint, tmp_path):
    code, out, err = run(*argv, GPUPLANE_CONFIG=str(tmp_path / "c"), GPUPLANE_SERVER="http://127.0.0.1:9",
                         GPUPLANE_TOKEN="t")
    assert (code, out) == (1, "")
    assert err.splitlines()[0] == first_line and err.rstrip().endswith(hint)


def test_did_you_mean_only_for_a_close_word(tmp_path):
    assert "Did you mean this?\n\tget" in run("gett")[2]
    assert "Did you mean" not in run("zzzzz")[2]


def test_help_and_no_arguments_exit_0():
    assert run()[0] == 0 and run("--help")[0] == 0 and run("rollout", "status", "--help")[0] == 0
    assert "explain" in run()[1]


def test_as_a_kubectl_plugin_it_names_itself_kubectl_gpuplane():
    assert program_name("/usr/local/bin/kubectl-gpuplane") == "kubectl gpuplane"
    assert program_name("/home/me/.venv/bin/gpuplane") == "gpuplane"
