"""A template and grammars that make the small test model think: its answers then hold a
thinking block whatever it would have said."""

THINKING_TEMPLATE = '''{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ if .Think }}<think>
{{ end }}'''

# Some thinking, the closing tag, then an answer: what a reasoning model writes after "<think>".
AFTER_OPENED_BLOCK = 'root ::= [a-z]{3,8} " " [a-z]{3,8} " " [a-z]{3,8} "</think>" "\\n" [A-Z] [a-z]{3,10} " " [a-z]{3,10} "."'
# The same with the opening tag: a model that always thinks, whatever it is asked.
WHOLE_BLOCK = 'root ::= "<think>" [a-z]{3,8} " " [a-z]{3,8} "</think>" "\\n" [A-Z] [a-z]{3,10} " " [a-z]{3,10} "."'
