package io.consumerdedup.spring;

/**
 * What is wrong with an {@link Idempotent} listener, found at start-up, and what to write instead:
 * the two parts of an {@link InvalidIdempotentListenerException}.
 */
record ListenerRefusal(String problem, String action) {}
