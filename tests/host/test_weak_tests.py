"""No test in the tree checks nothing (``tests.harness.weak_tests``), and the scan itself
finds each kind of test that cannot fail when one is planted."""

from __future__ import annotations

import ast

import pytest

from tests.harness.weak_tests import Module, Scanner, tree_modules

HELPERS = '''
def judge(x):
    if x != 1:
        raise AssertionError(x)

def quiet(x):
    return x + 1

def loops(x):
    return loops(x)
'''
TESTS = '''
import pytest
from tests.fake.helpers import judge, quiet, loops

def test_asserts(): assert 1 + 1 == 2
def test_raises():
    with pytest.raises(ValueError):
        int("x")
def test_through_a_helper(): judge(1)
def test_assert_method(v): v.assert_clean()
def test_pytest_fail(): pytest.fail("never")

def test_nothing(): quiet(1)
def test_constant(): assert True
def test_tautology(): x = 3; assert x == x
def test_recursion_only(): loops(1)

class TestGroup:
    def _check(self): assert quiet(1) == 2
    def test_through_a_method(self): self._check()
    def test_quiet_method(self): quiet(2)
'''


def _scan() -> Scanner:
    return Scanner([Module("tests.fake.helpers", ast.parse(HELPERS)),
                    Module("tests.fake.test_planted", ast.parse(TESTS))])


def test_every_test_of_the_tree_checks_something() -> None:
    scanner = Scanner(tree_modules())
    assert len(scanner.tests) > 800  # the scan found the tree's tests
    assert scanner.weak() == []


def test_planted_tests_that_cannot_fail_are_found() -> None:
    assert _scan().weak() == [
        "tests.fake.test_planted.TestGroup.test_quiet_method",
        "tests.fake.test_planted.test_constant",
        "tests.fake.test_planted.test_nothing",
        "tests.fake.test_planted.test_recursion_only",
        "tests.fake.test_planted.test_tautology",
    ]


@pytest.mark.parametrize("name", ["test_asserts", "test_raises", "test_through_a_helper",
                                  "test_assert_method", "test_pytest_fail",
                                  "TestGroup.test_through_a_method"])
def test_each_way_of_checking_counts(name) -> None:
    assert _scan().checks(f"tests.fake.test_planted.{name}")
