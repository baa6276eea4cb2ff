/*
 * test_unfinished.c - syntax_error_unfinished (cli/unfinished.c) on the
 * messages Ruby 3.1's parser (parse.y) and 3.4's (prism) wrote for
 * `RubyVM::InstructionSequence.compile(code, "(rbtrace eval)")`, copied
 * from those Rubies.
 */
#include <string.h>
#include "check.h"
#include "unfinished.h"

static int unfinished(const char *message)
{
    return syntax_error_unfinished(message, strlen(message));
}

/* parse.y: the end of input is named in the message's first line. */
static void test_parse_y(void)
{
    CHECK(unfinished("(rbtrace eval):1: syntax error, unexpected end-of-input, expecting '}'\n"
                     "h = {a: 1,\n"
                     "          ^\n"));
    CHECK(unfinished("(rbtrace eval):1: unterminated list meets end of file"));
    CHECK(unfinished("(rbtrace eval):1: unterminated string meets end of file"));
    CHECK(!unfinished("(rbtrace eval):1: syntax error, unexpected ')', expecting '}'\n"
                      "foo(a: {b: 1)\n"
                      "            ^\n"));
    CHECK(!unfinished("(rbtrace eval):1: syntax error, unexpected integer literal, expecting '}'\n"
                      "{a: 1 2}\n"
                      "      ^\n"));
    /* prism's phrases in the echoed source are not prism's diagnostics */
    CHECK(!unfinished("(rbtrace eval):1: syntax error, unexpected *\n"
                      "puts \"backtick string\" +* 2\n"
                      "                        ^\n"));
    CHECK(!unfinished("(rbtrace eval):1: syntax error, unexpected *\n"
                      "x = \"| ^ unterminated list;\" +* 2\n"
                      "                               ^\n"));
}

/* prism: unclosed lists, symbols, strings and backticks only at the end. */
static void test_prism_unterminated(void)
{
    CHECK(unfinished("(rbtrace eval):1: syntax error found\n"
                     "> 1 | %w(x\n"
                     "    | ^~~ unterminated list; expected a closing delimiter for the `%w`\n"));
    CHECK(unfinished("(rbtrace eval):1: syntax error found\n"
                     "> 1 | :\"ab\n"
                     "    |     ^ unterminated symbol; expected a closing delimiter for the "
                     "interpolated symbol\n"));
    CHECK(unfinished("(rbtrace eval):1: syntax error found\n"
                     "> 1 | %s(x\n"
                     "    | ^~~ unterminated quoted string; expected a closing delimiter for the "
                     "dynamic symbol\n"));
    CHECK(unfinished("(rbtrace eval):1: syntax error found\n"
                     "> 1 | `ls\n"
                     "    | ^ expected a closing delimiter for the `%x` or backtick string\n"));
    CHECK(unfinished("(rbtrace eval):1: syntax errors found\n"
                     "> 1 | [1,\n"
                     "    |   ^ expected an expression for the array element\n"
                     "    |    ^ unexpected end-of-input; expected a `]` to close the array\n"));
    /* in the quoted source only */
    CHECK(!unfinished("(rbtrace eval):1: syntax errors found\n"
                      "> 1 | puts \"backtick string\" +* 2\n"
                      "    |                           ^ unexpected integer; expected an "
                      "expression after the operator\n"));
}

/* prism's unclosed hash: unfinished only where the input ended. */
static void test_prism_hash(void)
{
    CHECK(unfinished("(rbtrace eval):1: syntax error found\n"
                     "> 1 | h = {a: 1,\n"
                     "    |           ^ expected a `}` to close the hash literal\n"));
    CHECK(unfinished("(rbtrace eval):2: syntax error found\n"
                     "  1 | h = {a: 1,\n"
                     "> 2 |  b: 2,\n"
                     "    |       ^ expected a `}` to close the hash literal\n"));
    /* a wrong bracket ended it: waiting would never end */
    CHECK(!unfinished("(rbtrace eval):1: syntax error found\n"
                      "> 1 | foo(a: {b: 1)\n"
                      "    |             ^ expected a `}` to close the hash literal\n"));
    CHECK(!unfinished("(rbtrace eval):1: syntax error found\n"
                      "> 1 | [{a: 1]\n"
                      "    |       ^ expected a `}` to close the hash literal\n"));
    CHECK(!unfinished("(rbtrace eval):1: syntax errors found\n"
                      "> 1 | {a: 1 2}\n"
                      "    |      ^ expected a `}` to close the hash literal\n"
                      "    |       ^ unexpected integer, expecting end-of-input\n"));
    CHECK(!unfinished("(rbtrace eval):2: syntax errors found\n"
                      "  1 | x = [1,\n"
                      "> 2 |  {a: 1)\n"
                      "    |       ^ unexpected ')', ignoring it\n"
                      "    |       ^ unexpected ')', expecting end-of-input\n"
                      "    |       ^ expected a `}` to close the hash literal\n"));
    /* no line marked in error, or no caret: not prism's form */
    CHECK(!unfinished("    |           ^ expected a `}` to close the hash literal\n"));
    CHECK(!unfinished("> 1 | h = {a: 1,\n"
                      "    |             expected a `}` to close the hash literal\n"));
    CHECK(!unfinished(""));
}

int main(void)
{
    test_parse_y();
    test_prism_unterminated();
    test_prism_hash();
    return check_report();
}
