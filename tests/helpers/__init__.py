"""Helpers the test modules share: ``from helpers.apptest import plotly_figures``, ``from helpers import user_modules``.

* ``apptest`` — the app in AppTest opened by a link (URL parameters, a page: ``open_app``) and what a run drew
  (Plotly figures as the browser gets them, attnviz's tables, the Check panel's verdicts and command), through
  AppTest's public API;
* ``check_table`` — ``attnviz check``'s table of a list of checks at once, what its streamed output adds up to, the
  summaries' counts of rules (``ALL_PASS``, ``rules_fail``), from ``checks.RULES``, the verdicts a printed table
  gives (``printed_results``), and ``attnviz check`` run in the test's process (``cli_table``);
* ``checkpoints`` — Hugging Face GPT-2 models with every LayerNorm and bias randomised, to save as checkpoints;
* ``malloc`` — glibc's ``mallopt`` and ``malloc_trim`` replaced by recorders (``attnviz.ui.memory``'s tuning);
* ``texts`` — hostile texts (markup, special tokens, control characters, emoji, a long paste) for runs and pages;
* ``user_modules`` — attention modules written as users write them (plain ``nn.Module``s), correct and buggy.
"""
