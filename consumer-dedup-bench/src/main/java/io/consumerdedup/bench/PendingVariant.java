package io.consumerdedup.bench;

/**
 * A variant the report lists without numbers, because what it measures does not exist yet.
 *
 * @param id its id, such as {@code V2}
 * @param title what it is
 * @param missing what it waits for
 */
public record PendingVariant(String id, String title, String missing) {}
