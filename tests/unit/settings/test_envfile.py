"""The deployment's environment file: `KEY=value` and `export KEY=value` lines read the same way
`sh` reads them (`set -a; . FILE`), the process environment winning, bad lines one error."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from iipub.core.errors import ConfigError
from iipub.settings import envfile

ROOT = Path(__file__).resolve().parents[3]

SAMPLE = (
    "# comment\n"
    "\n"
    "IIPUB_DATABASE_URL=mysql://iipub:p%40ss@127.0.0.1/iipub\n"
    "export OPENAI_API_KEY=sk-test-123\n"
    "export   IIPUB_CONFIG='/srv/iipub/iipub.toml'\n"
    'OPENAI_WEBHOOK_SECRET="whsec_abc=="\n'
    "IIPUB_LOG_LEVEL=warning  # trailing comment\n"
    "QUOTED_HASH='a # b'\n"
    'ESCAPED="say \\"hi\\" \\$HOME"\n'
    "EMPTY=\n"
)


def test_plain_and_export_lines_read_as_sh_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "env"
    path.write_text(SAMPLE, encoding="utf-8")
    parsed = envfile.parse(SAMPLE)
    assert parsed == {
        "IIPUB_DATABASE_URL": "mysql://iipub:p%40ss@127.0.0.1/iipub",
        "OPENAI_API_KEY": "sk-test-123",
        "IIPUB_CONFIG": "/srv/iipub/iipub.toml",
        "OPENAI_WEBHOOK_SECRET": "whsec_abc==",
        "IIPUB_LOG_LEVEL": "warning",
        "QUOTED_HASH": "a # b",
        "ESCAPED": 'say "hi" $HOME',
        "EMPTY": "",
    }
    # the same file sourced by sh with allexport: every variable, the same value
    names = " ".join(f'"${{{k}}}"' for k in parsed)
    shell = subprocess.run(["env", "-i", "sh", "-c", f'set -a; . "$1"; set +a; printf "%s\\n" {names}', "sh",
                            str(path)], capture_output=True, text=True, check=True, timeout=10)
    assert shell.stdout.split("\n")[:-1] == list(parsed.values())


def test_env_example_parses_and_names_what_cron_needs() -> None:
    parsed = envfile.parse((ROOT / "env.example").read_text(encoding="utf-8"))
    assert {"IIPUB_DATABASE_URL", "IIPUB_CONFIG", "OPENAI_API_KEY", "OPENAI_WEBHOOK_SECRET"} <= set(parsed)


def test_the_process_environment_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "env"
    path.write_text("A=from-file\nexport B=from-file\n", encoding="utf-8")
    environ = {"A": "from-env"}
    assert envfile.load(path, environ) == {"A": "from-file", "B": "from-file"}
    assert environ == {"A": "from-env", "B": "from-file"}


@pytest.mark.parametrize(("text", "needle"), [
    ("just words\n", "line 2: expected KEY=value"),
    ("A=1\nexport\n", "line 3: expected KEY=value"),
    ("1A=x\n", "line 2: expected KEY=value"),
    ("A='sk-unclosed\n", "line 2: the value's ' quote is not closed"),
    ('A="sk-x" y\n', "line 2: text after the quoted value"),
])
def test_a_bad_line_is_one_config_error_naming_the_line_not_the_value(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as caught:
        envfile.parse("SECRET=sk-do-not-echo\n" + text)
    assert "sk-" not in str(caught.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="environment file not found"):
        envfile.load(tmp_path / "nope", {})


@pytest.mark.slow
def test_the_runbooks_webhook_wsgi_loads_the_cron_env_file(tmp_path: Path) -> None:
    """The runbook's webhook.wsgi, run as mod_wsgi would import it, gets the same settings from
    the same file (with `export` lines) that cron reads."""
    text = (ROOT / "runbook.md").read_text(encoding="utf-8")
    start = text.index("```python", text.index("webhook.wsgi"))
    script = textwrap.dedent(text[start + len("```python"):text.index("```", start + 3)])
    assert "envfile.load(" in script and "/srv/iipub/env" in script
    env_file = tmp_path / "env"
    env_file.write_text("export OPENAI_WEBHOOK_SECRET=whsec_dGVzdA==\nIIPUB_DATABASE_URL=sqlite:///x.db\n",
                        encoding="utf-8")
    probe = script.replace("/srv/iipub/env", str(env_file)) + (
        "\nimport os\n"
        "print(os.environ['OPENAI_WEBHOOK_SECRET'], os.environ['IIPUB_DATABASE_URL'], callable(application))\n")
    ran = subprocess.run([sys.executable, "-c", probe],
                         env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["whsec_dGVzdA==", "sqlite:///x.db", "True"]
