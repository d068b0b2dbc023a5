# Small Jinja snippets vs Python jinja2 (configured as transformers does): each exercises one feature of the
# interpreter — operators, filters, tests, str/dict methods, scoping, macros, whitespace control, undefined rules,
# sandbox restrictions — and must render byte-identically, or raise on both sides.
import json
import subprocess

import pytest
from test_chat_templates import NOW_TEXT, make_env, python_render

# One snippet checks the unknown escape `\d` on purpose; jinja2 warns about it.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CTX = {
    "s": "  Hello, World!  ",
    "u": "Привет мир ✓ café",
    "n": 7,
    "f": 2.5,
    "big": 12345678901234,
    "t": True,
    "none": None,
    "xs": [3, 1, 2],
    "words": ["banana", "Apple", "cherry", "apple"],
    "d": {"b": 1, "a": [1, 2, {"x": None}], "c": "ç\"'<>&\n", "é": 1.0},
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo",
              "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}],
    "nested": {"a": {"b": {"c": [10, 20, 30]}}},
    "floats": [0.1, 1e-05, 1e16, 123456789.125, -0.0, 3.0, 1.5e300, 2.0 ** 0.5],
    "empty": [],
    "emptys": "",
}

SNIPPETS = [
    # literals and printing
    "{{ 1 }}|{{ 1.0 }}|{{ -3 }}|{{ 'a' }}|{{ \"b\" }}|{{ true }}|{{ True }}|{{ none }}|{{ None }}",
    "{{ [1, 'a', none, true, 2.5, {'k': 'v'}] }}|{{ (1,) }}|{{ (1, 2) }}|{{ () }}|{{ {} }}|{{ [] }}",
    "{{ d }}|{{ msgs[2] }}|{{ words }}",
    "{{ floats }}|{% for x in floats %}{{ x }},{% endfor %}",
    "{{ 'it\\'s' }}|{{ \"say \\\"hi\\\"\" }}|{{ 'tab\\there' }}|{{ ['it\\'s', 'q\"', 'both\\'\"', '\\n\\t\\\\'] }}",
    "{{ 'a' 'b' }}|{{ '\\u00e9\\x41\\101' }}|{{ '\\d' }}",
    "{{ u }}|{{ [u] }}|{{ {'ключ': u} }}",
    # arithmetic
    "{{ 7 / 2 }}|{{ 8 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7.5 // 2 }}|{{ 2 ** 10 }}"
    "|{{ 2 ** -1 }}",
    "{{ 1 + 2 * 3 - 4 }}|{{ (1 + 2) * 3 }}|{{ n * f }}|{{ n + t }}|{{ 0.1 + 0.2 }}|{{ 1e3 }}|{{ 10 / 3 }}",
    "{{ 'ab' * 3 }}|{{ [1] * 3 }}|{{ 3 * 'x' }}|{{ xs + [4] }}|{{ 'a' + 'b' }}|{{ -n }}|{{ +f }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ [1] ~ undefined_var ~ 2.0 }}",
    "{{ 1 / 0 }}",
    "{{ 'a' + 1 }}",
    "{{ none + 1 }}",
    "{{ undefined_var + 1 }}",
    "{{ 1 // 0 }}",
    # comparisons and logic
    "{{ 1 == 1.0 }}|{{ 1 == true }}|{{ 'a' < 'b' }}|{{ [1, 2] < [1, 3] }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 2 >= 2 }}",
    "{{ 'a' in 'cat' }}|{{ 2 in xs }}|{{ 'b' in d }}|{{ 'z' not in d }}|{{ 5 not in xs }}|{{ 'x' in undefined_var }}",
    "{{ 1 < 'a' }}",
    "{{ 1 in 'abc' }}",
    "{{ none and 1 }}|{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ [] or {} }}|{{ not none }}|{{ not xs }}"
    "|{{ undefined_var or 'dflt' }}",
    "{{ 'yes' if t else 'no' }}|{{ 'yes' if none else 'no' }}|{{ 'only' if false }}|[{{ 'x' if 0 }}]",
    "{{ undefined_var == undefined_var }}|{{ none == none }}|{{ undefined_var is none }}|{{ {'a': 1} == {'a': 1.0} }}",
    # attribute / item access
    "{{ d.b }}|{{ d['a'][2].x }}|{{ d.a.0 }}|{{ nested.a.b.c[-1] }}|{{ d.missing }}|[{{ d.missing }}]|{{ xs[5] }}",
    "{{ d.missing.attr }}",
    "{{ none.attr }}|{{ s.nope }}",
    "{{ undefined_var.attr }}",
    "{{ undefined_var['k'] }}",
    "{{ d['items'] is callable }}|{{ d.get('b') }}|{{ d.get('zz') }}|{{ d.get('zz', 5) }}|{{ d.keys() | list }}"
    "|{{ d.values() | list }}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    # slicing
    "{{ xs[1:] }}|{{ xs[:-1] }}|{{ xs[::-1] }}|{{ xs[::2] }}|{{ u[::-1] }}|{{ u[2:5] }}|{{ s[100:] }}|{{ xs[-100:1] }}",
    "{{ 'hello'[1] }}|{{ u[-1] }}|{{ msgs[-1].role }}|{{ xs[1:2:0] }}",
    # string methods
    "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ 'xxhixx'.strip('x') }}][{{ u.strip('✓ Пр') }}]",
    "{{ 'a,b,,c'.split(',') }}|{{ ' a  b \\n c '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}"
    "|{{ 'abc'.split('') }}",
    "{{ s.startswith('  He') }}|{{ s.endswith(('x', '!  ')) }}|{{ 'abc'.replace('b', 'B') }}"
    "|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'ab'.replace('', '-') }}",
    "{{ u.upper() }}|{{ u.lower() }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}"
    "|{{ \"they're bill's\".title() }}",
    "{{ 'abcabc'.find('c') }}|{{ u.find('мир') }}|{{ 'abc'.rfind('z') }}|{{ 'abcabc'.count('bc') }}"
    "|{{ '-'.join(['a', 'b']) }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '123'.isdigit() }}|{{ ''.isdigit() }}|{{ ' \\t'.isspace() }}"
    "|{{ 'Ab'.isalpha() }}",
    "{{ 'abc'.index('z') }}",
    "{{ xs.append(4) }}",
    "{{ d.pop('b') }}",
    "{{ d.update({'z': 1}) }}",
    "{{ xs.index(2) }}|{{ xs.count(3) }}",
    # filters
    "[{{ s | trim }}][{{ 'xxaxx' | trim('x') }}][{{ undefined_var | trim }}][{{ 5 | trim }}]",
    "{{ xs | length }}|{{ u | length }}|{{ d | length }}|{{ undefined_var | length }}|{{ xs | count }}",
    "{{ 5 | length }}",
    "{{ xs | first }}|{{ xs | last }}|{{ u | first }}|{{ u | last }}|{{ empty | first }}|[{{ empty | last }}]|{{ d "
    "| first }}",
    "{{ xs | join }}|{{ xs | join(', ') }}|{{ msgs | join('|', attribute='role') }}|{{ [none, 1, 'a'] | join('-') }}",
    "{{ msgs | map(attribute='role') | list }}|{{ words | map('upper') | join(',') }}|{{ xs | map('string') | list }}",
    "{{ msgs | map(attribute='missing', default='?') | list }}|{{ msgs | map(attribute='tool_calls.0.function.name') "
    "| list }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | list }}|{{ msgs | rejectattr('role', 'eq', 'user') "
    "| map(attribute='role') | list }}",
    "{{ msgs | selectattr('tool_calls') | list | length }}|{{ msgs | selectattr('tool_calls', 'defined') | list "
    "| length }}",
    "{{ xs | select('odd') | list }}|{{ xs | reject('odd') | list }}|{{ [0, 1, '', 'a', none] | select | list }}"
    "|{{ xs | select('gt', 1) | list }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | length }}",
    "{{ xs | select('odd') | first }}|{% if empty | select %}generator-truthy{% endif %}",
    "{{ xs | map('string') | last }}",
    "{% set g = xs | select('odd') %}{{ g | list }}{{ g | list }}",
    "{{ undefined_var | default('D') }}|{{ none | default('D') }}|{{ '' | default('D', true) }}|{{ 0 "
    "| d('Z', boolean=true) }}|{{ n | default(1) }}",
    "{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ 'hello-world foo(bar) [x]' | title }}|{{ 'hELLO wORLD' | capitalize }}",
    "{{ 'aXbX' | replace('X', '-') }}|{{ 'aaa' | replace('a', 'b', 1) }}|{{ 123 | replace('2', 'x') }}",
    "{{ 'abc' | list }}|{{ d | list }}|{{ undefined_var | list }}|{{ (1, 2) | list }}",
    "{{ 'x' | safe }}|{{ ('<b>' | safe) + '<i>' }}|{{ '<i>' + ('<b>' | safe) }}|{{ ('a' | safe) ~ '<' }}|{{ ('<' "
    "| safe) | length }}",
    "{{ \"Use '\" | safe + 'it\\'s <x> & \"y\"' + \"'\" | safe }}",
    "{{ 5 | string }}|{{ none | string }}|{{ xs | string }}|{{ ('a' | safe) | string }}|{{ 1.0 | string ~ 'x' }}",
    "{{ '42' | int }}|{{ '42.9' | int }}|{{ 'x' | int }}|{{ 'x' | int(7) }}|{{ 3.99 | int }}|{{ ' 12 ' | int }}"
    "|{{ '0x1A' | int(0, 16) }}|{{ true | int }}",
    "{{ '2.5' | float }}|{{ 'x' | float }}|{{ 3 | float }}|{{ 7 | abs }}|{{ -2.5 | abs }}|{{ 2.567 | round(2) }}"
    "|{{ 2.5 | round }}",
    "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}"
    "|{{ 'x\\ny' | indent('> ') }}",
    "{{ words | unique | list }}|{{ words | unique(case_sensitive=true) | list }}|{{ msgs | unique(attribute='role') "
    "| list | length }}",
    "{{ d | dictsort }}|{{ {'b': 2, 'A': 1, 'a': 3} | dictsort }}|{{ {'b': 2, 'a': 3} "
    "| dictsort(by='value', reverse=true) }}",
    "{{ words | sort }}|{{ words | sort(reverse=true) }}|{{ words | sort(case_sensitive=true) }}|{{ msgs "
    "| sort(attribute='role') | map(attribute='role') | join }}",
    "{{ xs | sum }}|{{ xs | min }}|{{ xs | max }}|{{ words | max }}|{{ xs | reverse | list }}|{{ u | reverse }}",
    "{{ d | items | list }}|{% for k, v in d | items %}{{ k }}{% endfor %}|{{ undefined_var | items | list }}",
    "{{ '<a href=\"x\">&' | e }}|{{ '<a>' | escape | length }}|{{ xs | attr('count') is callable }}"
    "|{{ 'one two  three' | wordcount }}",
    "{{ 'ab' | center(6) }}|{{ 'ab' | center(7) }}",
    # tojson as transformers configures it
    "{{ d | tojson }}|{{ u | tojson }}|{{ floats | tojson }}|{{ none | tojson }}|{{ (1, 'a') | tojson }}",
    "{{ d | tojson(indent=2) }}|{{ empty | tojson(indent=2) }}|{{ {} | tojson(indent=4) }}|{{ xs | tojson(indent=0) }}",
    "{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true) }}|{{ u | tojson(ensure_ascii=true) }}"
    "|{{ '😀' | tojson(ensure_ascii=true) }}",
    "{{ d | tojson(indent='\\t') }}|{{ msgs | tojson(indent=2, separators=(', ', ': ')) }}",
    "{{ '\\x01\\x7f\\u2028' | tojson }}|{{ {'k': 1.0e20, 2: 'int key', none: 'n'} | tojson }}",
    "{{ undefined_var | tojson }}",
    "{{ xs | select('odd') | tojson }}",
    # tests
    "{{ none is none }}|{{ n is number }}|{{ t is number }}|{{ t is boolean }}|{{ f is float }}|{{ n is integer }}"
    "|{{ t is integer }}",
    "{{ s is string }}|{{ d is mapping }}|{{ xs is sequence }}|{{ s is sequence }}|{{ d is sequence }}"
    "|{{ n is sequence }}|{{ undefined_var is sequence }}",
    "{{ xs is iterable }}|{{ n is iterable }}|{{ undefined_var is iterable }}|{{ (xs | select) is iterable }}|{{ (xs "
    "| select) is sequence }}",
    "{{ undefined_var is defined }}|{{ n is defined }}|{{ undefined_var is undefined }}|{{ d.missing is defined }}"
    "|{{ none is defined }}",
    "{{ n is odd }}|{{ n is even }}|{{ 9 is divisibleby 3 }}|{{ 9 is divisibleby(4) }}|{{ 'ab' is lower }}"
    "|{{ 'AB' is upper }}",
    "{{ n is eq 7 }}|{{ n is equalto 7 }}|{{ n is ne 7 }}|{{ n is gt 3 }}|{{ n is lt 3 }}|{{ n is ge 7 }}"
    "|{{ n is le 6 }}|{{ 2 is in xs }}",
    "{{ t is true }}|{{ 1 is true }}|{{ false is false }}|{{ none is sameas none }}|{{ 'upper' is filter }}"
    "|{{ 'odd' is test }}|{{ 'nope' is filter }}",
    "{{ range is callable }}|{{ n is callable }}|{{ s is not string }}|{{ s is not none and s is string }}",
    "{{ ('x' | safe) is escaped }}|{{ 'x' is escaped }}",
    # statements
    "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}|{% if none %}a{% elif 0 %}b{% else %}c{% endif %}",
    "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{"
    " loop.last }}/{{ loop.length }};{% endfor %}",
    "{% for x in xs %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}]{{ loop.cycle('a', 'b') }}{% endfor %}",
    "{% for x in empty %}no{% else %}empty-else{% endfor %}"
    "|{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{% else %}none{% endfor %}",
    "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}|{% for c in 'héllo' %}{{ c }}.{% endfor %}"
    "|{% for k in d %}{{ k }}{% endfor %}",
    "{% for x in none %}{% endfor %}",
    "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
    "{% for x in 5 %}{% endfor %}",
    "{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{{ loop.index }}"
    "|{% endfor %}",
    "{% set x = 1 %}{% for i in xs %}{% set x = i %}{% endfor %}{{ x }}",
    "{% set ns = namespace(x=1, items=[]) %}{% for i in xs %}{% set ns.x = ns.x + i %}{% set ns.items = ns.items +"
    " [i] %}{% endfor %}{{ ns.x }}{{ ns.items }}{{ ns.missing }}",
    "{% for x in [1, 2, 3] %}{% if loop.first %}{% set y = 1 %}{% endif %}[{{ y }}]{% endfor %}",
    "{% set y = 5 %}{% for x in [1, 2, 3] %}{% if loop.first %}{% set y = 1 %}{% endif %}[{{ y }}]{% endfor %}{{ y }}",
    "{% if true %}{% set z = 3 %}{% endif %}{{ z }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t2 = 1, 2 %}{{ t2 }}|{% set (c, d2) = [3, 4] %}{{ c }}{{ d2 }}",
    "{% set x %}block {{ n }}{% endset %}[{{ x }}]|{% set y | upper %}up {{ n }}{% endset %}[{{ y }}]",
    "{% filter upper %}hello {{ s | trim }}{% endfilter %}|{% filter trim "
    "| replace('a', 'A') %}  banana  {% endfilter %}",
    "{% set x = 1 %}{% set x.attr = 2 %}",
    "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }}"
    "|{{ greet('Bob', greeting='Hi') }}|{{ greet(name='Cy', greeting='Yo') }}",
    "{% macro m(a, b=a ~ '!') %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }}|{{ m(1, 2, 3, 4) }}"
    "|{{ m(1, z=5) }}",
    "{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside {{ n }}{% endcall %}",
    "{% macro li(x) %}<{{ caller(x * 2) }}>{% endmacro %}{% call(v) li(21) %}v={{ v }}{% endcall %}",
    "{% macro rec(k) %}{{ k }}{% if k > 0 %}{{ rec(k - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}",
    "{% macro m() %}{{ late }}{% endmacro %}{% set late = 'L' %}{{ m() }}",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m() }}|{{ m(1) | length }}|{{ m is callable }}",
    "{% set ns = namespace(found=false) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.found = true %}{%"
    " endif %}{% endfor %}{{ ns.found }}",
    "{% with a = 1, b = n %}{{ a + b }}{% endwith %}|{{ a }}",
    "{% generation %}gen {{ n }}{% endgeneration %}",
    "{{ range(5) | list }}|{{ range(2, 10, 3) | list }}|{{ range(5, 0, -2) | list }}|{{ dict(a=1, b='x') }}"
    "|{{ namespace(a=1).a }}",
    "{{ range(100001) | length }}",
    "{{ raise_exception('custom failure ' ~ n) }}",
    "{{ strftime_now('%Y-%m-%d %H:%M:%S %B %b %A %a %d %j') }}",
    "{{ undefined_func() }}",
    "{{ n() }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, b=2) }}",
    "{% macro m() %}x{% endmacro %}{% call m() %}body{% endcall %}",
    "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
    "{% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}",
    "{% for m in msgs %}{{ loop.changed(m.role) }}{% endfor %}{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor"
    " %}",
    # string formatting
    "{{ '%s and %d' % ('a', 3) }}|{{ '%s' % 'x' }}|{{ '%.2f' % 2.5 }}|{{ '%r' % 'q' }}|{{ '%5s|%-4d"
    "|%03d' % ('ab', 7, 5) }}",
    "{{ '%(a)s-%(b)s' % {'a': 1, 'b': none} }}|{{ '100%%' % () }}|{{ '%x %o %e' % (255, 8, 12345.678) }}",
    "{{ '%s %s' % ('only one',) }}",
    "{{ '%s' % (1, 2) }}",
    "{{ '{} {}'.format(1, 'a') }}|{{ '{0}{0}{1}'.format('x', 'y') }}|{{ '{name}!'.format(name='N') }}"
    "|{{ '{{}}{}'.format(3) }}",
    "{{ '{:>6}|{:<4}|{:^7}|{:*^9}'.format('ab', 'c', 'mid', 'x') }}|{{ '{:.3f}|{:5d}|{!r}'.format(3.14159, 42, 'q') }}",
    "{{ '{} {}'.format(1) }}",
    "{{ '%s-%s' | format('a', 2) }}|{{ [1, 2, 3, 4, 5] | batch(2) | list }}|{{ [1, 2, 3] | batch(2, 0) | list }}",
    "{{ 'hello world foo bar' | truncate(9) }}|{{ 'hello world foo bar' | truncate(9, true) }}|"
    "{{ 'short' | truncate(3, leeway=0, end='.') }}|{{ 'abc' | truncate(10) }}",
    "{% if false %}{{ x | groupby('a') }}{{ x | wordwrap(3) }}{% endif %}known-but-unused",
    # whitespace control (trim_blocks + lstrip_blocks)
    "a\n  {% if true %}\n  b\n  {% endif %}\nc",
    "a\n  {%- if true %}\n  b\n  {%+ endif %}\nc",
    "a  {{- ' x ' -}}  b\n{{ 'y' }}\n\n{{- 'z' }}",
    "{% for i in xs %}\n  {{ i }}\n{% endfor %}\n",
    "{% for i in xs -%}\n  {{ i }}\n{%- endfor %}",
    "  {# comment #}\nx {#- trimmed -#}  y\n  {#+ kept +#}z",
    "line1\r\nline2\r\n{% if true %}\r\nline3\r\n{% endif %}\r\n",
    "{% raw %}{{ not evaluated }}{% endraw %}|  {%- raw -%}  x  {%- endraw %}|",
    "text\n    {% set x = 1 %}    after\nend",
    "{{ '{{' }}|{{ {'a': {'b': 1}} }}|{{ [1, [2, [3]]] }}",
    "trailing newline kept?\n",
    "a\u00a0\u3000 {%- if true -%} \u2003\u00a0b{% endif %}|\u00a0 {% if true %}x{% endif %}|\n\u2003{% if 1 %}y{% endif %}",
    "{% raw -%} \u00a0 raw {%- endraw %}|{{ '\u00a0 x \u3000'.strip() }}|{{ '\u00a0 x \u3000' | trim }}",
    # syntax errors must fail on both sides
    "{% if %}{% endif %}",
    "{% for x in xs %}",
    "{{ 1 + }}",
    "{% endif %}",
    "{% unknown_tag %}",
    "{{ x | no_such_filter }}",
    "{% if x is no_such_test %}{% endif %}",
    "{% if false %}{{ x | no_such_filter }}{% endif %}ok",
    "{{ 'unterminated }}",
    "{# unterminated comment",
    "{{ (1, 2 }}",
    "{% macro m(a=1, b) %}{% endmacro %}",
    "{% break %}",
    "{% do xs.append(1) %}",
    "{% include 'x.jinja' %}",
]


def test_snippets_match_jinja2(llmserve_bin, tmp_path, capsys):
    env = make_env()
    lines, expected = [], []
    for snippet in SNIPPETS:
        try:
            template = env.from_string(snippet)
        except Exception as e:  # noqa: BLE001
            template = e
        expected.append(python_render(template, CTX))
        lines.append(json.dumps({"template": snippet, "context": CTX, "now": NOW_TEXT}, ensure_ascii=False))
    batch = tmp_path / "snippets.jsonl"
    batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = subprocess.run([str(llmserve_bin), "template", "render", "--batch", str(batch)], capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    got = [json.loads(line) for line in r.stdout.decode("utf-8").split("\n") if line]
    assert len(got) == len(SNIPPETS)
    failures = []
    for snippet, want, have in zip(SNIPPETS, expected, got):
        if "error" in want and "error" in have and want.get("raised", "") in have["error"]:
            continue
        if "text" in want and want["text"] == have.get("text"):
            continue
        failures.append(f"--- {snippet!r}\n  jinja2:   {want}\n  llmserve: {have}")
    num_errors = sum(1 for w in expected if "error" in w)
    with capsys.disabled():
        print(f"\njinja snippets: {len(SNIPPETS)} compared ({num_errors} raise in jinja2), {len(failures)} mismatches")
    assert not failures, "\n".join(failures)
