"""The help formatter of attnserve's commands: every option's help ends with its default."""

from __future__ import annotations

import argparse


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds "(default: X)" unless the help already states a default or there is none to show
    (None, False of a switch, an empty string, or an option without a default of its own)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == ""
        if "default:" in text or unset or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)
