// Command webhook is migflex's fallback admission webhook.
package main

func main() {}
