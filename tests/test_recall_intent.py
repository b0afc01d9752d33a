"""The recall-intent detector: which messages ask about the past (and so may run deep recall).
Its precision and recall on LoCoMo and MADial are measured in bench/recall.py."""

from __future__ import annotations

import pytest

from agent.recall_intent import recall_intent

LOOKING_BACK = [
    "What did we decide about the Lisbon trip?",
    "Do you remember when we met Anna in Porto?",
    "Remind me what the plumber quoted.",
    "Last time we ordered from that place, what did I get?",
    "When did Caroline go to the support group?",
    "What book did Melanie recommend?",
    "What is John's favorite book series?",
    "How long has Gina been dancing?",
    "Did I ever tell you my sister's name?",
    "What's my gym locker code?",
    "Which medicine am I allergic to?",
    "我的护照号码是多少？",
    "上次我们去哪家餐厅吃的？",
    "我之前说过我喜欢什么颜色吗",
    "你还记得我们的旅行计划吗？",
    "卡罗琳什么时候去了支持小组？",
    "我们决定了什么？",
    # The owner's facts asked without "my <noun>" (bench/compaction_survival.py's paraphrases)
    "Until when is my travel document valid?",
    "Which digits open the cabinet where I stash things while working out?",
    "Which antibiotic gives me a bad reaction?",
    "How does my colleague like his espresso drink served?",
    "Who looks after the greenery while we're on holiday?",
    "我健身房储物柜的密码是多少？",
    "我对什么过敏？",
    "我是什么血型？",
    "我们的停车位是几号？",
]
NOT_LOOKING_BACK = [
    "Write a haiku about rain.",
    "Can you help me plan dinner for tonight?",
    "What should I wear to the party?",
    "Last time I drew a puppy, my teacher praised me!",  # a story, not a question
    "Hey, did you know? I did homework with my friends today.",
    "Why is the subway always so crowded?",
    "Will Mom be angry?",
    "What should I do with my free time?",
    "",
    "你觉得我应该怎么办？",
    "我可以做些什么来帮助奶奶吗？",
    "今天天气真好！",
    "Really? I absolutely love ice cream! When are we going?",
    "When addition and subtraction are mixed together, I just get confused.",
    "真的吗？我超级喜欢吃冰淇淋的！我们什么时候去？",
    "你猜我最喜欢什么动物？",
    "我做错了什么吗？",
    "我们可以画什么？",
    "我不知道该看哪个动画片，好多都看起来很好玩。",
]


@pytest.mark.parametrize("message", LOOKING_BACK)
def test_questions_about_the_past_are_recall(message: str) -> None:
    assert recall_intent(message), recall_intent(message).reason


@pytest.mark.parametrize("message", NOT_LOOKING_BACK)
def test_requests_stories_and_present_questions_are_not(message: str) -> None:
    assert not recall_intent(message), recall_intent(message).reason


def test_the_reason_names_the_rule_that_decided() -> None:
    assert recall_intent("What did we decide about the trip?").reason == "memory phrase"
    assert recall_intent("Should I bring an umbrella?").reason == "asks for advice or action"
